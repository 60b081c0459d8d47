"""The fault stream's accounting from a job directory's records (synthetic events and metrics):
each fault's times, its badput by phase, a fault whose restart was hit by the next one, and
finding a rank's own process by the mark in its environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.harness.faultkit import wait_for
from tests.harness.faultstream import FaultStream, Injected, badput_table, inside_and_outside, rank_pids


def _write(path, records) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_each_faults_times_and_phases_come_from_the_jobs_records(tmp_path):
    ev = lambda kind, t, **kw: dict(kind=kind, time=t, **kw)  # noqa: E731 - a one-line local helper
    _write(
        tmp_path / "events.jsonl",
        [
            ev("started", 0.0, rank=0, host="h1", pid=None, attempt=0),
            ev("failure", 10.5),
            ev("restart", 11.0, attempt=1),
            ev("started", 11.2, rank=0, host="h2", pid=None, attempt=1),
            ev("hung", 30.0),
            ev("restart", 30.5, attempt=2),
            ev("failure", 31.0),  # the restart was hit
            ev("restart", 31.5, attempt=3),
        ],
    )
    step = lambda a, g, t: dict(kind="step", attempt=a, global_step=g, time=t, rank=0, step_time_ms=1000.0)  # noqa: E731
    _write(
        tmp_path / "metrics.jsonl",
        [step(0, 1, 2.0), step(0, 9, 9.0), step(1, 6, 15.0), step(1, 9, 17.0), step(1, 10, 18.0), step(3, 11, 40.0)],
    )
    fs = FaultStream(str(tmp_path), kinds=("kill", "stop", "restart"), at_steps=(9, 10), mark="m")
    fs.injected = [
        Injected("kill", 0, "h1", 0, 10.0, best_before=9),
        Injected("stop", 0, "h2", 1, 25.0, best_before=10),
        Injected("restart", 0, "h2", 2, 30.9, best_before=10),
    ]
    kill, stop, restart = fs.account()
    assert (kill.noticed, kill.restart, kill.first_step, kill.new_step) == (10.5, 11.0, 15.0, 18.0)
    assert kill.phases() == {"detect": 0.5, "teardown": 0.5, "restart": 4.0, "retrain": 3.0} and kill.lost() == 8.0
    assert stop.phases()["detect"] == 5.0 and stop.new_step == stop.first_step == 30.9  # hit by the next fault
    assert "hit by the next fault" in stop.note
    assert (restart.noticed, restart.restart, restart.new_step) == (31.0, 31.5, 40.0)
    # Net of the steps made: from the last progress (step 9 at 9.0) to the new step 10 at 18.0, less
    # that step's 1 s; the stop's from step 10 at 18.0 to where the next fault hit its restart (no
    # new step); the restart's from that hit to step 11, less its 1 s.
    assert (kill.net(), stop.net(), restart.net()) == (8.0, 30.9 - 18.0, 40.0 - 30.9 - 1.0)
    assert (kill.lost(), stop.lost(), restart.lost()) == (8.0, 30.9 - 25.0, 40.0 - 30.9)
    table = badput_table([kill, stop, restart], 0.0)
    assert table[1].split()[:5] == ["kill", "0", "h1", "10.0", "10.5"] and table[-2].startswith("sum")
    assert float(table[-2].split()[-2]) == round(kill.lost() + stop.lost() + restart.lost(), 1)
    assert float(table[-2].split()[-1]) == round(kill.net() + stop.net() + restart.net(), 1)
    # Beside it, mslaunch's own accounting of the same job (no summary.json: counted from its files).
    from launcher.logs.goodput import account

    both = {line.split()[0]: line.split()[1:] for line in inside_and_outside([kill, stop, restart], str(tmp_path))}
    mine = account(fs.view.events(), fs.view.steps())
    for phase in ("detect", "teardown", "restart", "retrain"):
        outside = sum(f.phases()[phase] or 0.0 for f in (kill, stop, restart))
        assert both[phase] == [f"{outside:.1f}", f"{mine.badput_s[phase]:.1f}"], phase
    assert both["startup"] == ["-", f"{mine.badput_s['startup']:.1f}"] and both["mslaunch:"][0] == "goodput"


def test_a_checkpoint_the_job_trained_on_without_costs_nothing_and_takes_no_restart(tmp_path):
    ev = lambda kind, t, **kw: dict(kind=kind, time=t, **kw)  # noqa: E731
    _write(
        tmp_path / "events.jsonl",
        [ev("ckpt_failed", 12.0, rank=1, attempt=0, why="disk"), ev("failure", 20.0), ev("restart", 21.0, attempt=1)],
    )
    _write(tmp_path / "metrics.jsonl", [dict(kind="step", attempt=1, global_step=9, time=25.0, rank=0)])
    fs = FaultStream(str(tmp_path), kinds=("ckpt", "kill"), at_steps=(5, 8), mark="m")
    fs.injected = [Injected("ckpt", 1, "h2", 0, 10.0, best_before=5), Injected("kill", 0, "h1", 0, 19.0, 8)]
    ckpt, kill = fs.account()
    assert ckpt.trained_on and ckpt.noticed == 12.0 and ckpt.restart is None and ckpt.lost() == 0.0
    assert set(ckpt.phases().values()) == {0.0} and "trained on" in ckpt.note
    assert (kill.noticed, kill.restart, kill.new_step) == (20.0, 21.0, 25.0)  # the restart is the kill's
    assert ckpt.net() == 0.0 and kill.net() is None  # no step time in the records: no net figure
    fs.injected = [Injected("kill", 0, "h1", 0, 11.0, best_before=5)]  # only a ckpt fault is noticed by it
    assert fs.account()[0].noticed == 20.0


def test_a_ranks_own_process_is_found_by_its_mark_not_its_children(tmp_path):
    env = dict(os.environ, FAULT_STREAM_MARK=tmp_path.name, RANK_ID="1", MSLAUNCH_ATTEMPT="2")
    child = (
        "import subprocess, sys, time; "
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"
    )
    proc = subprocess.Popen([sys.executable, "-c", child], env=env, start_new_session=True)
    try:
        assert wait_for(lambda: _two(tmp_path.name), 20)
        assert rank_pids(tmp_path.name) == {("2", 1): proc.pid}
        assert rank_pids("another-mark") == {}
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()
    assert wait_for(lambda: rank_pids(tmp_path.name) == {}, 10)


def _two(mark: str) -> bool:
    """Both processes carry the mark (the child started)."""
    needle = f"FAULT_STREAM_MARK={mark}".encode()
    n = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/environ", "rb") as fh:
                    n += needle in fh.read().split(b"\0")
            except OSError:
                pass
    return n >= 2


def test_ranks_of_a_step_that_stands_for_them_come_from_their_pid_events(tmp_path):
    """Under Slurm and mpirun one process (srun, mpirun) stands for every rank: its ``started``
    event has no rank; each rank's host is in its ``pid`` event."""
    from tests.harness.faultstream import JobView

    _write(
        tmp_path / "events.jsonl",
        [
            dict(kind="started", name="srun", rank=None, host="localhost", attempt=0, time=1.0),
            dict(kind="pid", name="rank 0", rank=0, host="node1", pid=12, attempt=0, time=2.0),
            dict(kind="pid", name="rank 1", rank=1, host="node2", pid=13, attempt=0, time=2.0),
            dict(kind="pid", name="rank 1", rank=1, host="node4", pid=14, attempt=1, time=9.0),
        ],
    )
    view = JobView(str(tmp_path))
    assert view.ranks(0) == {0: "node1", 1: "node2"} and view.ranks(1) == {1: "node4"}
