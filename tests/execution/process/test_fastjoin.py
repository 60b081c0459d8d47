"""The fastjoin shim: built once and kept, quicker polls only for libmindspore_cpu.so's sleeps,
MindSpore's deadline kept, and nothing of it in what a rank sees."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
import time

import pytest

from launcher.execution.process import fastjoin

#: A nanosleep that records what it was asked and returns at once (preloaded before the shim,
#: so the shim's own nanosleep calls reach it): the schedule read without waiting it.
RECORDER = r"""
#include <stdio.h>
#include <time.h>
int nanosleep(const struct timespec *req, struct timespec *rem) {
    (void)rem;
    fprintf(stderr, "nap %lld\n", (long long)req->tv_sec * 1000LL + req->tv_nsec / 1000000L);
    return 0;
}
"""

#: A library that polls as MindSpore's do: ``sleep(seconds)`` ``n`` times.
POLLER = r"""
#include <unistd.h>
void polls(int n, unsigned seconds) { for (int i = 0; i < n; i++) (void)sleep(seconds); }
"""


def _cc(tmp_path, name, source):
    src = tmp_path / (name + ".c")
    src.write_text(source)
    out = tmp_path / name
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", str(out), str(src)], check=True, capture_output=True)
    return str(out)


def _run_polls(tmp_path, library, n, seconds, preload):
    code = f"import ctypes; ctypes.CDLL({library!r}).polls({n}, {seconds})"
    env = dict(os.environ, LD_PRELOAD=":".join(preload))
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return [int(line.split()[1]) for line in r.stderr.splitlines() if line.startswith("nap ")]


@pytest.fixture()
def built(tmp_path, monkeypatch):
    monkeypatch.setenv("MSLAUNCH_HOME", str(tmp_path / "home"))
    path, why = fastjoin.build_shim()
    assert why is None and path is not None
    return path


@pytest.mark.needs("cc")
def test_the_polls_of_libmindspore_cpu_are_quick_first_and_keep_the_deadline(tmp_path, built):
    lib_dir = tmp_path / "lib"
    lib_dir.mkdir()
    target = _cc(lib_dir, "libmindspore_cpu.so", POLLER)
    recorder = _cc(tmp_path, "recorder.so", RECORDER)
    naps = _run_polls(tmp_path, target, 40, 3, [recorder, built])
    assert naps[:9] == [100, 100, 100, 200, 200, 400, 400, 800, 800]
    assert len(naps) == 40 and max(naps) <= 6000
    # What MindSpore would have waited by each poll, from the 17th on: never less.
    assert all(sum(naps[:k]) >= 3000 * k for k in range(17, 41)), naps
    assert naps[-1] == 3000  # the time not waited is paid back, then polls are MindSpore's own
    # A thread's quick polls are its own: another process (thread) starts quick again.
    assert _run_polls(tmp_path, target, 2, 3, [recorder, built]) == [100, 100]
    # A poll shorter than the quick one is left as long as it was asked.
    assert _run_polls(tmp_path, target, 1, 1, [recorder, built]) == [100]


@pytest.mark.needs("cc")
def test_sleeps_from_anywhere_else_go_to_the_c_library_untouched(tmp_path, built):
    other = _cc(tmp_path, "libother.so", POLLER)
    recorder = _cc(tmp_path, "recorder.so", RECORDER)
    started = time.monotonic()
    assert _run_polls(tmp_path, other, 1, 1, [recorder, built]) == []  # not the shim's nanosleep
    assert time.monotonic() - started >= 1.0  # the C library's sleep slept its second


@pytest.mark.needs("cc")
def test_built_once_and_kept_whole(tmp_path, monkeypatch, built):
    assert os.path.basename(built).startswith(fastjoin.SHIM_PREFIX) and built.endswith(".so")
    assert os.path.dirname(built) == str(tmp_path / "home" / "cache")
    # A second build finds it: no compiler is run (this one would fail).
    failing = tmp_path / "failing-cc"
    failing.write_text("#!/bin/sh\nexit 1\n")
    failing.chmod(failing.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("CC", str(failing))
    assert fastjoin.build_shim() == (built, None)
    assert sorted(os.listdir(tmp_path / "home" / "cache")) == [os.path.basename(built)]


def test_a_compiler_that_fails_leaves_nothing_and_says_why(tmp_path, monkeypatch):
    monkeypatch.setenv("MSLAUNCH_HOME", str(tmp_path / "home"))
    failing = tmp_path / "failing-cc"
    failing.write_text("#!/bin/sh\necho 'fastjoin.c:1: error: no headers here'\nexit 3\n")
    failing.chmod(failing.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("CC", str(failing))
    path, why = fastjoin.build_shim()
    assert path is None and why == f"{failing} exited 3: fastjoin.c:1: error: no headers here"
    assert os.listdir(tmp_path / "home" / "cache") == []  # no half-written library, no work folder
    env = {"MSLAUNCH_HOME": str(tmp_path / "home"), "CC": str(failing), "PATH": "", "LD_PRELOAD": "/x.so"}
    assert fastjoin.zygote_env(env) == (env, why)


def test_a_compiler_that_hangs_is_ended_whole_in_bounded_time(tmp_path, monkeypatch):
    """The agent builds the shim in its event loop: a compiler (and what it started) that does not
    answer is ended, process group and all, and the zygote starts without the shim."""
    monkeypatch.setenv("MSLAUNCH_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(fastjoin, "BUILD_TIMEOUT", 0.5)
    pids = tmp_path / "pids"
    hanging = tmp_path / "hanging-cc"
    hanging.write_text(f"#!/bin/sh\nsleep 300 &\necho $! $$ > {pids}\nwait\n")
    hanging.chmod(hanging.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("CC", str(hanging))
    assert fastjoin.build_shim() == (None, f"{hanging} failed: no answer in 0.5 s")
    assert os.listdir(tmp_path / "home" / "cache") == []
    from tests.harness.localagent import gone

    assert gone([int(p) for p in pids.read_text().split()]) == []  # the compiler and its child


def test_without_a_compiler_or_when_turned_off_the_zygote_starts_as_before(tmp_path):
    env = {"MSLAUNCH_HOME": str(tmp_path / "home"), "PATH": str(tmp_path)}  # no cc there
    assert fastjoin.zygote_env(env) == (env, "no C compiler (cc, gcc or clang) on the PATH")
    off = dict(os.environ, MSLAUNCH_HOME=str(tmp_path / "home"), MSLAUNCH_FAST_JOIN="0")
    assert fastjoin.zygote_env(off) == (off, "MSLAUNCH_FAST_JOIN=0")
    assert not (tmp_path / "home").exists()  # nothing built when it is off


@pytest.mark.needs("cc")
def test_the_shim_goes_first_in_ld_preload_and_the_zygote_takes_it_out(tmp_path, built):
    env, why = fastjoin.zygote_env({"MSLAUNCH_HOME": str(tmp_path / "home"), "LD_PRELOAD": "/opt/user.so"})
    assert why is None and env["LD_PRELOAD"] == f"{built}:/opt/user.so"
    fastjoin.drop_shim(env)
    assert env["LD_PRELOAD"] == "/opt/user.so"  # the user's own, as it was
    alone, _ = fastjoin.zygote_env({"MSLAUNCH_HOME": str(tmp_path / "home")})
    fastjoin.drop_shim(alone)
    assert "LD_PRELOAD" not in alone
    theirs = {"LD_PRELOAD": "/opt/user.so:" + built}  # not where zygote_env puts it: not ours to drop
    fastjoin.drop_shim(theirs)
    assert theirs == {"LD_PRELOAD": "/opt/user.so:" + built}


@pytest.mark.needs("cc")
def test_a_zygote_child_sees_neither_the_shim_nor_ld_preload(tmp_path):
    """The zygote runs with the shim mapped; the rank forked from it has the planned environment
    and its own maps hold the shim only as the zygote's inheritance, never in its environment."""
    from launcher.execution.local.zygote import ZygoteBackend, ZygoteProcess
    from tests.execution.local.test_zygote import proc

    script = tmp_path / "s.py"
    script.write_text(
        textwrap.dedent(
            """
            import os
            print(os.environ.get("LD_PRELOAD"), os.environ.get("MSLAUNCH_FAST_JOIN"))
            """
        )
    )
    z = ZygoteBackend(preload=("json",))
    try:
        h = z.start(
            proc("rank 0", [sys.executable, str(script)], cwd=str(tmp_path)), str(tmp_path / "r.log"), str(tmp_path)
        )
        assert isinstance(h, ZygoteProcess) and h.wait() == 0
        assert z.ready_info["fast_join"] is True  # the zygote has it
        assert (tmp_path / "r.log").read_text() == "None None\n"  # the rank's environment does not
    finally:
        z.close()


@pytest.mark.needs("cc")
def test_a_hosts_zygote_under_the_ssh_agent_has_the_shim_and_its_ranks_do_not_see_it(tmp_path):
    """The agent's zygote (sent to the host as source text with this module's) builds the shim
    there and starts with it; the rank it forks has the planned environment."""
    from launcher.execution.ssh.agent import zygote_op
    from tests.harness.localagent import LocalAgent, gone

    script = tmp_path / "rank.py"
    script.write_text("import os\nprint(repr(os.environ.get('LD_PRELOAD')), os.getppid())\n")
    a = LocalAgent()
    try:
        a.write(zygote_op(sys.executable, ("json",), {"MSLAUNCH_HOME": str(tmp_path / "home")}))
        a.start(1, [sys.executable, str(script)], str(tmp_path), {"X": "1"}, zygote=True)
        a.event("exit", 1)
        printed, parent = a.text(1).split()
        zygote = int(parent)
        assert zygote != a.proc.pid and printed == "None"  # forked from the zygote; no LD_PRELOAD
        (built,) = os.listdir(tmp_path / "home" / "cache")  # built on the host, in its MSLAUNCH_HOME
        with open(f"/proc/{zygote}/maps") as fh:
            assert str(tmp_path / "home" / "cache" / built) in fh.read()
    finally:
        assert a.close() == 0
    assert gone([zygote]) == []
