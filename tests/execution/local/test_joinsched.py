"""JoinWatch on real processes: a rank started under SCHED_BATCH gets SCHED_OTHER back, on every
thread, once its log shows MindSpore's end-of-init line, when it ends, or at the time limit."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from launcher.execution.local.joinsched import JOINED_MARKERS, JoinWatch
from launcher.execution.process.proctree import batch_start_wanted, restore_normal

pytestmark = pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="Linux scheduling policies")

# A child under SCHED_BATCH with a second thread; it logs the marker when it finds `go` and then
# reports the policy of both threads once the parent writes `check`.
CHILD = r"""
import os, sys, threading, time
os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
stop = threading.Event()
t = threading.Thread(target=stop.wait); t.start()
here = sys.argv[1]
while not os.path.exists(os.path.join(here, "pre")):
    time.sleep(0.01)
print("warming up: not the marker", flush=True)
while not os.path.exists(os.path.join(here, "go")):
    time.sleep(0.01)
print(sys.argv[2], flush=True)
while not os.path.exists(os.path.join(here, "check")):
    time.sleep(0.01)
print("policies", os.sched_getscheduler(0), os.sched_getscheduler(t.native_id), flush=True)
stop.set(); t.join()
"""


def _start(tmp_path, marker: str) -> "tuple[subprocess.Popen[bytes], str]":
    log = str(tmp_path / "rank.log")
    out = open(log, "ab")
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path), marker], stdout=out, stderr=out)
    out.close()
    return proc, log


def _wait(pred, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < end, "condition not met in time"
        time.sleep(0.02)


def _policies(proc: "subprocess.Popen[bytes]", tmp_path, log: str) -> "list[int]":
    (tmp_path / "check").write_text("")
    assert proc.wait(timeout=30) == 0
    line = [ln for ln in open(log).read().splitlines() if ln.startswith("policies")][0]
    return [int(x) for x in line.split()[1:]]


def test_restored_on_every_thread_once_joined(tmp_path):
    proc, log = _start(tmp_path, "[WARNING] ME ... " + JOINED_MARKERS[0].decode() + ": mccl_world_group")
    watch = JoinWatch(limit=120)
    try:
        _wait(lambda: os.sched_getscheduler(proc.pid) == os.SCHED_BATCH)
        watch.watch(proc.pid, log)
        (tmp_path / "pre").write_text("")
        _wait(lambda: (watch.seen(proc.pid) or 0) > 0)  # the watch has read a line that is not the marker
        assert watch.restored == []
        assert os.sched_getscheduler(proc.pid) == os.SCHED_BATCH
        (tmp_path / "go").write_text("")
        _wait(lambda: watch.restored)
        assert watch.restored == [(proc.pid, "joined")]
        assert _policies(proc, tmp_path, log) == [os.SCHED_OTHER, os.SCHED_OTHER]
    finally:
        watch.close()
        proc.kill()
        proc.wait()


def test_other_lines_do_not_restore_but_the_limit_does(tmp_path):
    proc, log = _start(tmp_path, "epoch: 1 step: 1, loss is 2.3")
    watch = JoinWatch(limit=0.5)
    try:
        _wait(lambda: os.sched_getscheduler(proc.pid) == os.SCHED_BATCH)
        (tmp_path / "pre").write_text("")
        (tmp_path / "go").write_text("")
        watch.watch(proc.pid, log)
        _wait(lambda: watch.restored)
        assert watch.restored == [(proc.pid, "time limit")]
        assert _policies(proc, tmp_path, log) == [os.SCHED_OTHER, os.SCHED_OTHER]
    finally:
        watch.close()
        proc.kill()
        proc.wait()


def test_an_ended_rank_is_dropped_and_close_restores_the_rest(tmp_path):
    proc, log = _start(tmp_path, "x")
    watch = JoinWatch(limit=120)
    try:
        _wait(lambda: os.sched_getscheduler(proc.pid) == os.SCHED_BATCH)
        watch.watch(proc.pid, log)
        watch.close()
        assert watch.restored == [(proc.pid, "closed")]
        assert os.sched_getscheduler(proc.pid) == os.SCHED_OTHER
    finally:
        proc.kill()
        proc.wait()
    assert restore_normal(proc.pid) == 0  # gone: nothing to change


def test_only_dynamic_workers_under_the_default_policy():
    assert batch_start_wanted({"MS_ROLE": "MS_WORKER"}) == (os.sched_getscheduler(0) == os.SCHED_OTHER)
    assert not batch_start_wanted({"MS_ROLE": "MS_SCHED"})
    assert not batch_start_wanted({})


def test_processes_started_during_the_start_up_get_the_normal_policy_too(tmp_path):
    """A rank that started a helper process while under SCHED_BATCH: both get SCHED_OTHER back."""
    child = (
        "import os, subprocess, sys\nos.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))\n"
        "g = subprocess.Popen([sys.executable, '-c', 'import sys; sys.stdin.read()'], stdin=subprocess.PIPE)\n"
        "print(g.pid, flush=True)\nsys.stdin.read()\ng.stdin.close(); g.wait()\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", child], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        grandchild = int(proc.stdout.readline())
        _wait(lambda: os.sched_getscheduler(grandchild) == os.SCHED_BATCH)
        assert restore_normal(proc.pid) >= 2
        assert os.sched_getscheduler(proc.pid) == os.sched_getscheduler(grandchild) == os.SCHED_OTHER
    finally:
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
