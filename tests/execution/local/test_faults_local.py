"""Fault tests, local backend, real processes: mslaunch killed or stopped at any moment leaves
nothing running (setsid / double-forked grandchildren included), and failures are diagnosed
right (the earliest exit wins; every attempt is in summary.json).

Each test marks every process of its job (see ``tests/faultkit.py``) and asserts that none of
them, and none of mslaunch's descendants, is left.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from tests.harness.cli import mslaunch_argv
from tests.harness.faultkit import (
    ESCAPER,
    Fault,
    escaper,
    kill_all,
    marked,
    new_marker,
    signal_during_startup,
    survivors,
    tree,
    wait_for,
)
from tests.harness.paths import TESTS

HERE = TESTS
PROG = os.path.join(HERE, "scripts", "rankprog.py")


@pytest.fixture
def fault(tmp_path):
    f = Fault(tmp_path)
    yield f
    kill_all(marked(f.marker))


def test_sigkill_of_mslaunch_ends_setsid_grandchildren(fault):
    proc = fault.popen(*escaper(fault, "hang"))
    # scheduler + 2 ranks, each: itself, a child sleep, a setsid grandchild sleep
    assert wait_for(lambda: len(marked(fault.marker)) >= 9, 60), marked(fault.marker)
    snapshot = tree(proc.pid)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert survivors(fault.marker, snapshot) == []


def test_sigkill_after_a_rank_exited_and_left_an_orphan(fault):
    """Rank 1 exits 0 at once, leaving a setsid grandchild (re-parented away from its tree)."""
    proc = fault.popen(*escaper(fault, "leave", "1"))
    # rank 1 itself is gone; its child and orphan stay: 3 + 3 + 2
    assert wait_for(lambda: len(marked(fault.marker)) >= 8 and (fault.dir / "worker_1.log").exists(), 60), marked(
        fault.marker
    )
    snapshot = tree(proc.pid)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert survivors(fault.marker, snapshot) == []


def test_normal_failure_ends_setsid_grandchildren(fault):
    proc = fault.popen(*escaper(fault, "segv", "0"))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGSEGV, err
    assert survivors(fault.marker, {}) == []
    cause = fault.summary()["root_cause"]
    assert (cause["name"], cause["signal"]) == ("rank 0", "SIGSEGV")


@pytest.mark.parametrize(
    "sig, delays", [(signal.SIGTERM, (0.0, 0.25, 0.9, 2.0)), (signal.SIGINT, (0.1, 0.5, 1.4))], ids=["15", "2"]
)
def test_stop_signal_during_startup_sweep(tmp_path, sig, delays):
    """A stop signal 0 .. 2 s after mslaunch's first statement (its handler is installed
    then; before it the interpreter is still starting): a stopped summary, 128+N, a message,
    nothing left.  One handler takes every stop signal, so the two signals share the sweep's
    moments between them: each moment is tried once, each signal early and late."""
    for i, delay in enumerate(delays):
        marker = new_marker()
        job = tmp_path / f"job{i}"
        argv = mslaunch_argv(
            "run",
            "--np",
            "2",
            "--master-port",
            "auto",
            "--no-sched-wait",
            "--log-dir",
            str(job),
            "--tee",
            "none",
            "--grace",
            "2",
            "--no-python",
            sys.executable,
            ESCAPER,
            marker,
            "hang",
        )
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(tmp_path))
        snapshot, _, err = signal_during_startup(proc, delay, sig)
        try:
            assert proc.returncode == 128 + sig, (delay, proc.returncode, err)
            assert "mslaunch" in err, (delay, err)
            summary = json.loads((job / "summary.json").read_text())
            assert summary["status"] == "stopped" and summary["exit_code"] == 128 + sig, (delay, summary)
            assert summary["message"] == f"mslaunch received {signal.Signals(sig).name}"
            assert survivors(marker, snapshot) == [], delay
        finally:
            kill_all(marked(marker))


def test_earliest_of_two_close_failures_is_the_root_cause(fault):
    """Rank 0 exits 3, rank 1 exits 4 right after it (well under a millisecond later, in the
    kernel's order); five runs, the root cause is rank 0 every time, never 'stopped'."""
    for run in range(5):
        for name in ("ready", "rank0.pid"):
            path = fault.piddir / name
            if path.exists():
                path.unlink()
        r = fault.run(*escaper(fault, "first"), extra=("--log-dir", str(fault.dir) + str(run)))
        summary = json.loads((fault.dir.parent / (fault.dir.name + str(run)) / "summary.json").read_text())
        assert r.returncode == 3, (run, r.stderr, summary["root_cause"])
        assert summary["root_cause"]["name"] == "rank 0", run
        rank0 = [p for p in summary["processes"] if p["name"] == "rank 0"][0]
        assert rank0["torn_down"] is False and rank0["exit_code"] == 3
    assert survivors(fault.marker, {}) == []


def test_a_worker_failing_while_the_scheduler_port_is_awaited_fails_fast(fault):
    """--no-sched-wait: workers start at once and mslaunch still waits for the scheduler's port
    (here it never opens); a worker's failure meanwhile ends the job now, as the root cause --
    not after --start-timeout as "the port did not accept"."""
    r = fault.run(PROG, "deaf", "0.2", "1", "5", extra=("--start-timeout", "500"), timeout=400)
    assert r.returncode == 5, r.stderr
    s = fault.summary()
    assert s["root_cause"]["name"] == "rank 1", s["root_cause"]
    sched = [p for p in s["processes"] if p["name"] == "scheduler"][0]
    assert sched["torn_down"] is True and "did not accept" not in r.stderr, (sched, r.stderr)
    assert survivors(fault.marker, {}) == []


def test_every_attempt_is_in_the_summary(fault):
    r = fault.run(PROG, "failonce", "0.2", "1", "7", extra=("--max-restarts", "1", "--env", f"PIDDIR={fault.piddir}"))
    assert r.returncode == 0, r.stderr
    s = fault.summary()
    assert s["status"] == "succeeded" and s["attempts"] == 2
    first, second = s["attempt_results"]
    assert (first["attempt"], first["status"], first["exit_code"]) == (0, "failed", 7)
    assert first["root_cause"]["name"] == "rank 1" and first["log_dir"] == str(fault.dir)
    assert [p["exit_code"] for p in first["processes"] if p["name"] == "rank 1"] == [7]
    assert (second["attempt"], second["status"], second["exit_code"]) == (1, "succeeded", 0)
    assert second["log_dir"] == str(fault.dir / "attempt_1")
