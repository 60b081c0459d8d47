"""``launcher/workloads/cluster.py``'s ``exit_now``: the exit code, flushed output, and which
atexit handlers run (MindSpore's cluster finalize among them) under which launcher.  No MindSpore."""
from __future__ import annotations

import os
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


@pytest.mark.parametrize("extra, handlers_run", [
    ({}, True),  # msrun or by hand: the cluster's finalize must run (the scheduler waits for it)
    ({"MSLAUNCH_ATTEMPT": "0"}, False),  # mslaunch's supervisor stops the scheduler itself
    ({"MSLAUNCH_ATTEMPT": "1", "OMPI_COMM_WORLD_SIZE": "2"}, True),  # under mpirun the scheduler waits again
])
def test_exit_now_flushes_exits_with_the_code_and_skips_atexit_only_under_mslaunchs_supervision(extra, handlers_run):
    env = {k: v for k, v in os.environ.items() if k not in ("MSLAUNCH_ATTEMPT", "OMPI_COMM_WORLD_SIZE")}
    env.update(extra, PYTHONPATH=ROOT)
    for code in (0, 3):
        r = subprocess.run([sys.executable, "-c", PROG, str(code)], capture_output=True, text=True, env=env, timeout=60)
        assert r.returncode == code, r.stderr
        assert r.stdout == "result line" + ("atexit ran\n" if handlers_run else "")
