"""``launcher/workloads/cluster.py``'s ``exit_now``: the exit code, flushed output, and which
atexit handlers run (MindSpore's cluster finalize among them) under which launcher.  No MindSpore."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROG = (
    "import atexit, sys\n"
    "from launcher.workloads.cluster import exit_now\n"
    "atexit.register(lambda: print('atexit ran', flush=True))\n"
    "sys.stdout.write('result line')\n"  # no newline, not flushed: exit_now flushes it
    "exit_now(int(sys.argv[1]))\n"
)


@pytest.mark.parametrize(
    "extra",
    [
        {},  # msrun or by hand: the cluster's finalize must run (the scheduler waits for it)
        {"MSLAUNCH_ATTEMPT": "0"},  # mslaunch: the peers' last collective waits for this rank's acknowledgement
        {"MSLAUNCH_ATTEMPT": "1", "OMPI_COMM_WORLD_SIZE": "2"},  # mpirun
    ],
)
@pytest.mark.e2e
def test_exit_now_flushes_runs_the_exit_handlers_and_exits_with_the_code_under_every_launcher(extra):
    env = {k: v for k, v in os.environ.items() if k not in ("MSLAUNCH_ATTEMPT", "OMPI_COMM_WORLD_SIZE")}
    env.update(extra, PYTHONPATH=ROOT)
    for code in (0, 3):
        r = subprocess.run([sys.executable, "-c", PROG, str(code)], capture_output=True, text=True, env=env, timeout=60)
        assert r.returncode == code, r.stderr
        assert r.stdout == "result line" + "atexit ran\n"


CRASHING = (
    "import atexit, ctypes, os, sys, threading\n"
    "from launcher.workloads.cluster import exit_now\n"
    "how = sys.argv[2]\n"
    "def crash():\n"
    "    if how == 'segv':\n"
    "        ctypes.string_at(0)\n"
    "    elif how == 'abort':\n"
    "        os.abort()\n"
    "    else:\n"  # a crash in another thread while the main thread waits for it
    "        t = threading.Thread(target=ctypes.string_at, args=(0,))\n"
    "        t.start(); t.join()\n"
    "atexit.register(crash)\n"
    "print('result line', flush=True)\n"
    "exit_now(int(sys.argv[1])) if sys.argv[3] == 'guarded' else sys.exit(int(sys.argv[1]))\n"
)


@pytest.mark.e2e
@pytest.mark.parametrize("how, signum", [("segv", 11), ("abort", 6), ("thread", 11)])
def test_a_crash_in_the_exit_cleanup_after_the_result_keeps_the_results_exit_code(how, signum):
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("MSLAUNCH_ATTEMPT", "OMPI_COMM_WORLD_SIZE", "PYTHONFAULTHANDLER")
    }
    env.update(PYTHONPATH=ROOT, MSLAUNCH_ATTEMPT="0", OMPI_COMM_WORLD_SIZE="2")  # under mpirun: the cleanup runs
    for code in (0, 3):
        r = subprocess.run(
            [sys.executable, "-c", CRASHING, str(code), how, "guarded"],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert r.returncode == code, r.stderr
        assert r.stdout == "result line\n"
        crashed = [ln for ln in r.stderr.splitlines() if "exit cleanup crashed" in ln]
        assert len(crashed) == 1 and f"exit code {code} stands" in crashed[0], r.stderr
        assert ("SIGABRT" if signum == 6 else "SIGSEGV") in crashed[0]
    # the same crash without exit_now ends the process by the signal: the guard is what keeps the code
    r = subprocess.run(
        [sys.executable, "-c", CRASHING, "0", how, "plain"], capture_output=True, text=True, env=env, timeout=60
    )
    assert r.returncode == -signum, r.stderr


def test_a_crash_before_the_result_is_still_a_crash():
    prog = "import ctypes\nfrom launcher.workloads.cluster import exit_now\nctypes.string_at(0)\nexit_now(0)\n"
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("PYTHONFAULTHANDLER", None)
    r = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == -11 and "exit cleanup crashed" not in r.stderr


@pytest.mark.e2e
def test_an_exit_cleanup_that_does_not_end_ends_with_the_results_code_after_the_grace():
    """Under mpirun the cleanup runs; one that waits (with Python's lock released, as a blocking
    call does) ends the process with the result's code once the grace is over, with one line."""
    prog = (
        "import atexit, time\n"
        "from launcher.workloads import cluster\n"
        "cluster.TEARDOWN_GRACE = 0.5\n"
        "atexit.register(lambda: time.sleep(600))\n"
        "print('result line', flush=True)\n"
        "cluster.exit_now(int(__import__('sys').argv[1]))\n"
    )
    env = dict(os.environ, PYTHONPATH=ROOT, MSLAUNCH_ATTEMPT="0", OMPI_COMM_WORLD_SIZE="2")
    for code in (0, 3):
        r = subprocess.run([sys.executable, "-c", prog, str(code)], capture_output=True, text=True, env=env, timeout=60)
        assert r.returncode == code and r.stdout == "result line\n", r.stderr
        (line,) = r.stderr.splitlines()
        assert "exit cleanup did not end within 0.5 s" in line and f"exit code {code} stands" in line


@pytest.mark.e2e
@pytest.mark.parametrize("alarm_reaches_it", [True, False])
def test_an_exit_cleanup_that_holds_pythons_lock_is_still_ended_in_bounded_time(alarm_reaches_it):
    """A cleanup blocked in native code that holds Python's lock (the grace's thread cannot run):
    the alarm ends it with the result's code, on the thread that holds the lock.  Where the alarm
    goes to a thread that waits for the lock instead (here: the main thread blocks SIGALRM),
    faulthandler's watchdog ends it (exit 1, the stacks on stderr)."""
    prog = (
        "import atexit, ctypes, signal, sys\n"
        "from launcher.workloads import cluster\n"
        "cluster.TEARDOWN_GRACE, cluster.TEARDOWN_SECONDS, cluster.TEARDOWN_LAST = 0.5, 1, 1\n"
        "def stuck():\n"
        "    if sys.argv[2] == 'blocked':\n"
        "        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})\n"
        "    ctypes.PyDLL(None).sleep(600)\n"  # a native call that keeps Python's lock
        "atexit.register(stuck)\n"
        "print('result line', flush=True)\n"
        "cluster.exit_now(int(sys.argv[1]))\n"
    )
    env = dict(os.environ, PYTHONPATH=ROOT, MSLAUNCH_ATTEMPT="0", OMPI_COMM_WORLD_SIZE="2")
    how = "reached" if alarm_reaches_it else "blocked"
    for code in (0, 3) if alarm_reaches_it else (0,):
        r = subprocess.run(
            [sys.executable, "-c", prog, str(code), how], capture_output=True, text=True, env=env, timeout=60
        )
        assert r.stdout == "result line\n", r.stderr
        if alarm_reaches_it:
            assert r.returncode == code, r.stderr
            # the alarm's handler runs Python on the thread that held the lock, which lets the
            # grace's thread in too: either writes the one line; the code is the result's
            (line,) = r.stderr.splitlines()
            assert re.search(r"exit cleanup did not end within (1|0\.5) s", line), line
            assert f"exit code {code} stands" in line
        else:
            assert r.returncode == 1, r.stderr
            assert "Timeout (0:00:02)!" in r.stderr and "in stuck" in r.stderr, r.stderr
