"""Stack dumps of real processes: py-spy where it is, /proc where it is not; the remote form."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys

import pytest

from launcher.execution.probes import program_source
from launcher.execution.process import stackdump
from launcher.execution.process.stackdump import write_dumps

SRC = stackdump.__file__
#: What a host runs: proctree's source, then stackdump's (launcher.execution.probes.program_source).
PROGRAM = program_source("launcher.execution.process.stackdump")


@pytest.fixture
def sleeper():
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time\ndef parked():\n    time.sleep(600)\nprint('up', flush=True)\nparked()"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline() == "up\n"
    yield proc
    proc.kill()
    proc.wait()


@pytest.mark.e2e
def test_stackdump_runs_stand_alone_from_its_source_and_prints_json(sleeper, tmp_path):
    """As sent to a host: the standard library only (the one import from ``launcher``, proctree's,
    is skipped: its source comes first), no ``launcher`` package there."""
    src = open(SRC).read()
    imports = set(re.findall(r"^\s*(?:from|import) (\w+)", src, re.M))
    assert imports <= {
        "__future__",
        "json",
        "launcher",
        "os",
        "re",
        "shutil",
        "subprocess",
        "sys",
        "tempfile",
        "threading",
        "time",
        "typing",
    }, imports
    assert re.findall(r"^\s*from (launcher\S*) import", src, re.M) == ["launcher.execution.process.proctree"]
    code = "import sys; sys.modules['launcher'] = None\nexec(compile(sys.argv.pop(1), '<string>', 'exec'))\n"
    out = subprocess.run(
        [sys.executable, "-S", "-c", code, PROGRAM, "--stdout", f"rank3={sleeper.pid}"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    recs = [json.loads(line) for line in out.stdout.splitlines()]
    assert [(r["name"], r["pid"]) for r in recs] == [("rank3", sleeper.pid)]
    assert (
        recs[0]["text"].startswith(f"# mslaunch stack dump: rank3, pid {sleeper.pid}, ")
        and "parked (<string>:3)" in recs[0]["text"]
    )


def test_without_py_spy_the_kernel_view_is_dumped_and_said_so(tmp_path):
    python = shutil.which("python3", path="/usr/bin:/bin")
    if (
        python is None
        or os.path.exists(os.path.join(os.path.dirname(python), "py-spy"))
        or shutil.which("py-spy", path="/usr/bin:/bin")
    ):
        pytest.skip("needs a python3 in /usr/bin without py-spy beside it")
    sleep = subprocess.Popen(["sleep", "600"])
    try:
        env = {"PATH": "/usr/bin:/bin"}
        out = subprocess.run(
            [python, "-S", "-c", PROGRAM, str(tmp_path), f"rank0={sleep.pid}"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            cwd=tmp_path,
        )
        assert out.returncode == 0, out.stderr
        text = (tmp_path / f"rank0.pid{sleep.pid}.txt").read_text()
    finally:
        sleep.kill()
        sleep.wait()
    assert "tool: /proc" in text and "py-spy is not installed" in text and "the kernel's view from /proc" in text
    assert re.search(rf'task {sleep.pid} \[S \(sleeping\)\] "sleep"  wchan: \w+', text), text


def test_write_dumps_names_files_by_rank(tmp_path):
    lines = (
        "\n".join(
            json.dumps(r)
            for r in [
                {"name": "rank1", "pid": 7, "text": "a"},
                {"name": "rank1", "pid": 9, "text": "b"},
                {"name": "scheduler", "pid": 3, "text": "c"},
                {"junk": 1},
            ]
        )
        + "\nnot json\n"
    )
    old = os.umask(0o022)
    try:
        got = write_dumps(str(tmp_path), lines)
    finally:
        os.umask(old)
    assert {k: [os.path.basename(p) for p in v] for k, v in got.items()} == {
        1: ["rank1.pid7.txt", "rank1.pid9.txt"],
        None: ["scheduler.pid3.txt"],
    }
    assert (tmp_path / "rank1.pid9.txt").read_text() == "b"
    # a dump may show a rank's environment: 0600 whatever the umask
    assert sorted(oct(p.stat().st_mode & 0o777) for p in tmp_path.iterdir()) == ["0o600"] * 3


@pytest.mark.e2e
def test_one_remote_command_dumps_every_running_rank_of_a_host(tmp_path, sleeper):
    from types import SimpleNamespace

    from launcher.execution.ssh.dump import StackDumps, agent_dump

    calls = []

    class Conn:  # runs the command here, as the host would
        def run(self, command, timeout):
            calls.append(command)
            done = subprocess.run(command, shell=True, capture_output=True, timeout=timeout)
            return done.returncode, done.stdout, done.stderr

    def handle(rank, pid, done=False):
        return SimpleNamespace(plan=SimpleNamespace(rank=rank), pid=pid, done=done)

    agent = SimpleNamespace(
        conn=Conn(),
        python=sys.executable,
        stack_dumps=StackDumps(),
        handles={0: handle(0, sleeper.pid), 1: handle(1, sleeper.pid), 2: handle(2, 1, done=True)},
    )
    got = {r: agent_dump(agent, str(tmp_path), r) for r in (0, 1, 2)}
    assert len(calls) == 1 and "rank0=" in calls[0] and "rank1=" in calls[0] and "rank2=" not in calls[0]
    assert [os.path.basename(got[r][r][0]) for r in (0, 1)] == [
        f"rank0.pid{sleeper.pid}.txt",
        f"rank1.pid{sleeper.pid}.txt",
    ]
    assert got[2] == {}


@pytest.mark.e2e
def test_marker_mode_finds_the_job_ranks_by_their_environment(tmp_path):
    """``--marker KEY=VALUE --ranks``: as a host runs it for mpirun's ranks: a rank's process (the
    wrapper's RANK_ID set for its exec) first, then its child, and no process of another job
    (another marker value) or of a rank not asked for."""
    code = (
        "import os, subprocess, sys, time\nif sys.argv[1:] == ['parent']:\n    subprocess.Popen([sys.executable, "
        "__file__])\n"
        "print('up', flush=True)\ntime.sleep(600)\n"
    )
    script = tmp_path / "r.py"
    script.write_text(code)
    procs = []

    def start(marker: str, rank: str):
        env = dict(os.environ, MSLAUNCH_LOG_DIR=marker, RANK_ID=rank)
        p = subprocess.Popen(
            ["/bin/sh", "-c", f"RANK_ID={rank} exec {sys.executable} {script} parent"],
            env={**env, "RANK_ID": ""},
            stdout=subprocess.PIPE,
            text=True,
        )
        procs.append(p)
        assert p.stdout.readline() == "up\n" and p.stdout.readline() == "up\n"
        return p

    try:
        mine = start(str(tmp_path / "a"), "2")
        start(str(tmp_path / "b"), "2")  # another job's rank 2
        start(str(tmp_path / "a"), "5")  # a rank this host was not asked for
        out = subprocess.run(
            [
                sys.executable,
                "-S",
                "-c",
                PROGRAM,
                "--stdout",
                "--marker",
                f"MSLAUNCH_LOG_DIR={tmp_path / 'a'}",
                "--ranks",
                "2,3",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
        )
        recs = [json.loads(line) for line in out.stdout.splitlines()]
        child = stackdump.descendants(mine.pid)
        assert [(r["name"], r["pid"]) for r in recs] == [("rank2", mine.pid)] + [("rank2", p) for p in child], (
            out.stderr
        )
        assert len(child) == 1 and "tool: py-spy" in recs[0]["text"]
    finally:
        for p in procs:
            for pid in stackdump.descendants(p.pid):
                os.kill(pid, 9)
            p.kill()
            p.wait()
