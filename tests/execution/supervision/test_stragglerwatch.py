"""The straggler watch: fake handles on a fake clock (which ranks are sampled, the events, the
summary), and a real local job whose rank is put under a CPU quota mid-job (cgroup v1) beside
CPU-hungry processes: nobody is named before, the rank is named with its host after, and cleared
once it runs free again."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

import pytest

from launcher.execution.process.handle import ReportedProcess
from launcher.execution.supervision.stragglerwatch import StragglerWatch
from launcher.planning.health.stragglers import StragglerPolicy
from launcher.planning.job.events import Straggler
from launcher.planning.job.kinds import Role
from launcher.planning.job.spec import ProcPlan
from tests.harness.cli import mslaunch_argv, run_cli
from tests.harness.hostfaults import cgroup_v1_cpu, throttle_pids, unthrottle_group

DPLOOP = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "scripts", "dploop.py"
)


class _Handle(ReportedProcess):
    def __init__(self, rank: Optional[int], role: Role = Role.WORKER) -> None:
        name = f"rank {rank}" if rank is not None else "scheduler"
        self.plan = ProcPlan(name, role, f"h{rank}", rank, 0, 0, None, ("x",), (), "/", "/dev/null")
        self.host, self.log_path, self.started = f"h{rank}", "/dev/null", time.time()
        self.rates = (0.3, 0.05)
        self.t, self.cpu, self.delay = 0.0, 0.0, 0.0

    def advance(self, dt: float) -> None:
        self.t += dt
        self.cpu += self.rates[0] * dt
        self.delay += self.rates[1] * dt

    def sched_figures(self) -> Optional[Tuple[float, float, float]]:
        if self.plan.rank == 3:
            raise OSError("a look that fails")
        return (self.t, self.cpu, self.delay)

    def terminate(self) -> None:
        pass

    def kill(self) -> None:
        pass


def test_the_watch_names_a_starved_rank_once_then_clears_it() -> None:
    clock = [0.0]
    got: List[Any] = []
    watch = StragglerWatch(StragglerPolicy(window=6.0), got.append, clock=lambda: clock[0])
    handles = [_Handle(None, Role.SCHEDULER), _Handle(0), _Handle(1), _Handle(2), _Handle(3)]
    watch.begin(0)

    def run(seconds: int) -> None:
        for _ in range(seconds):
            clock[0] += 1.0
            for h in handles:
                h.advance(1.0)
            watch.look(handles, {})

    run(10)
    assert got == []
    handles[3].rates = (0.03, 0.97)
    run(12)
    assert [(e.rank, e.host, e.cleared) for e in got] == [(2, "h2", False)]
    assert isinstance(got[0], Straggler) and got[0].evidence.startswith("rank 2 on h2 waited for CPU")
    handles[3].rates = (0.3, 0.05)
    run(12)
    assert [(e.rank, e.cleared) for e in got] == [(2, False), (2, True)]
    summary = watch.summary()
    (row,) = summary["stragglers"]
    assert row["rank"] == 2 and row["host"] == "h2" and row["attempt"] == 0 and "cleared" in row
    assert summary["straggler_watch"]["looks"] == 34 and summary["straggler_watch"]["cpu_s"] >= 0


def test_an_exited_rank_is_not_sampled() -> None:
    clock = [0.0]
    watch = StragglerWatch(StragglerPolicy(window=6.0), lambda e: None, clock=lambda: clock[0])
    h0, h1 = _Handle(0), _Handle(1)
    watch.begin(0)
    clock[0] = 2.0
    watch.look([h0, h1], {1: (0, 0.0)})
    assert list(watch.judge._ranks) == [0]


# ------------------------------------------------------------------ a real job


def _events(job: str) -> List[Dict[str, Any]]:
    try:
        with open(os.path.join(job, "events.jsonl")) as fh:
            return [json.loads(line) for line in fh if line.strip()]
    except OSError:
        return []


def _steps(log: str) -> int:
    try:
        with open(log) as fh:
            lines = [line for line in fh if line.startswith("epoch: 1 step: ")]
    except OSError:
        return 0
    return int(lines[-1].split()[3].rstrip(",")) if lines else 0


def _until(what: str, cond: Any, within: float = 120.0) -> Any:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError(f"not within {within:g} s: {what}")


@pytest.mark.e2e
@pytest.mark.needs("root")
@pytest.mark.cost(35)
def test_a_rank_under_a_cpu_quota_is_named_and_cleared_and_a_busy_machine_names_nobody(tmp_path) -> None:
    if not cgroup_v1_cpu():
        pytest.skip("needs the cgroup v1 cpu controller (/sys/fs/cgroup/cpu/cpu.cfs_quota_us)")
    job, stop = str(tmp_path / "job"), str(tmp_path / "stop")
    argv = mslaunch_argv(
        "run", "--np", "3", "--master-port", "auto", "--log-dir", job, "--tee", "none", "--straggler", "warn:6",
        "--no-python", sys.executable, DPLOOP, "150000", stop,
    )  # fmt: skip
    group = f"mslaunch-test-straggler-{os.getpid()}-{tmp_path.name}"
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]  # a busy machine
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        pids = _until(
            "3 ranks started",
            lambda: (
                {e["rank"]: e["pid"] for e in _events(job) if e["kind"] == "started" and e["rank"] is not None}
                if sum(e["kind"] == "started" and e["rank"] is not None for e in _events(job)) == 3
                else None
            ),
        )  # noqa: E501
        # healthy beside the hogs: 60 steps take several windows here
        _until("60 steps", lambda: _steps(os.path.join(job, "worker_0.log")) >= 60)
        assert [e for e in _events(job) if e["kind"] == "straggler"] == []
        for h in hogs:
            h.kill()
            h.wait()
        throttle_pids(group, [pids[1]], quota_us=3000)
        named = _until("rank 1 named", lambda: [e for e in _events(job) if e["kind"] == "straggler"])
        assert (named[0]["rank"], named[0]["host"], named[0]["cleared"]) == (1, "localhost", False), named
        assert named[0]["evidence"].startswith("rank 1 on localhost waited for CPU "), named
        status = run_cli("status", job)
        assert f"(attempt 0): {named[0]['evidence']}" in status.stdout, status.stdout
        unthrottle_group(group)
        cleared = _until(
            "rank 1 cleared", lambda: [e for e in _events(job) if e["kind"] == "straggler" and e["cleared"]]
        )
        assert cleared[0]["rank"] == 1
        with open(stop, "w"):
            pass
        _, err = proc.communicate(timeout=120)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
        unthrottle_group(group)
        with open(stop, "w"):
            pass
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert f"mslaunch: straggler: {named[0]['evidence']}" in err
    with open(os.path.join(job, "summary.json")) as fh:
        summary = json.load(fh)
    assert [(s["rank"], s["host"]) for s in summary["stragglers"]] == [(1, "localhost")]
    status = run_cli("status", job)
    assert "straggler since " in status.stdout and ", cleared " in status.stdout, status.stdout
    for pid in pids.values():
        assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"


def test_replace_asks_once_per_named_rank_and_notes_it_in_the_summary():
    from launcher.planning.health.stragglers import StragglerVerdict, Update

    asked: List[Tuple[str, str]] = []
    watch = StragglerWatch(
        StragglerPolicy("replace", 6.0), lambda e: None, on_named=lambda h, ev: asked.append((h, ev)) or True
    )
    verdict = StragglerVerdict(1, "10.0.0.3", 0.97, (0.2, 0.3), 6.0, 5.0)
    watch.judge.feed = lambda samples, hosts, now: Update(named=(verdict,))  # type: ignore[method-assign]
    watch._look([], {})
    assert asked == [("10.0.0.3", verdict.evidence)]
    assert watch.summary()["stragglers"][0]["replaced"] is True
