"""Spare hosts on restart: which failures count against a host, and the supervisor re-planning a
restart without a host that failed too often (in-memory backend; the real thing over ssh is in
tests/integration/test_spare_hosts.py)."""

from __future__ import annotations

import json
import signal
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import pytest

from launcher.errors import PlanError
from launcher.execution.results import FAILED, HUNG, SUCCEEDED, AttemptResult, ProcResult
from launcher.execution.settings import SuperviseOptions
from launcher.execution.supervision.hostfaults import Fault, HostFaults, Spares, attributed, moves_text
from launcher.execution.supervision.restarts import AttemptProgress
from launcher.execution.supervision.supervisor import Supervisor
from launcher.logs.hangreport import HangReport
from launcher.planning.job.events import Event
from launcher.planning.job.spec import Exclusion, Plan, ProcPlan
from tests.execution.fakebackend import FakeBackend, FakeProcess

KILL = -signal.SIGKILL


def _proc(
    rank: Optional[int],
    host: str,
    rc: Optional[int],
    ended: float,
    torn: bool = False,
    reason: Optional[str] = None,
    lost: bool = False,
) -> ProcResult:
    """``lost``: the backend said the host was lost (its typed ``host_lost``, with ``reason``)."""
    return ProcResult(
        f"rank {rank}" if rank is not None else "scheduler",
        rank,
        host,
        rc,
        0.0,
        ended,
        "/j/l",
        torn_down=torn,
        reason=reason,
        host_lost=reason if lost else None,
    )


def _attempt(
    procs: Sequence[ProcResult], status: str = FAILED, hang: Optional[Dict[str, Any]] = None, k: int = 0
) -> AttemptResult:
    return AttemptResult(
        k,
        "/j",
        status,
        1,
        0.0,
        1.0,
        tuple(procs),
        hang=HangReport.from_json(dict(hang, kind="no_progress")) if hang else None,
    )


@pytest.mark.parametrize(
    "procs,status,hang,faults",
    [
        # the earliest failure, killed by a signal mslaunch did not send: its host
        (
            [_proc(0, "h1", -15, 3.0, torn=True), _proc(2, "h2", KILL, 1.0), _proc(3, "h2", 0, 2.0)],
            FAILED,
            None,
            [Fault("h2", "rank 2 killed by SIGKILL")],
        ),
        # what died after the first failure is a consequence: not counted
        ([_proc(0, "h1", -6, 2.0), _proc(2, "h2", KILL, 1.0)], FAILED, None, [Fault("h2", "rank 2 killed by SIGKILL")]),
        # an exit code (the program's own failure) says nothing about the host
        ([_proc(2, "h2", 1, 1.0)], FAILED, None, []),
        # torn down by mslaunch: not a cause
        ([_proc(2, "h2", KILL, 1.0, torn=True)], FAILED, None, []),
        # the scheduler dying is not a rank's failure
        ([_proc(None, "h1", KILL, 1.0)], FAILED, None, []),
        # a lost host counts whatever came first, and only once per host
        (
            [
                _proc(0, "h1", 3, 1.0),
                _proc(2, "h2", 255, 2.0, reason="connection to h2 lost (closed)", lost=True),
                _proc(3, "h2", 255, 2.0, reason="connection to h2 lost (closed)", lost=True),
            ],
            FAILED,
            None,
            [Fault("h2", "rank 2: connection to h2 lost (closed)", lost=True)],
        ),
        # a host is lost only when its backend says so: a message with the word in it is not a lost host
        (
            [_proc(2, "h2", 255, 2.0, reason="mslaunch could not wait for it: connection pool lost its lock")],
            FAILED,
            None,
            [],
        ),
        ([_proc(2, "h2", None, 2.0, reason="lost: a backend's bug")], FAILED, None, []),
        # a hang: the culprit's host
        (
            [_proc(0, "h1", -15, 1.0, torn=True), _proc(3, "h2", -15, 1.0, torn=True)],
            HUNG,
            {"culprit": {"rank": 3, "evidence": "x"}},
            [Fault("h2", "rank 3 hang culprit")],
        ),
        ([_proc(0, "h1", -15, 1.0, torn=True)], HUNG, {"culprit": None}, []),
        # a success, or a stop, blames nobody
        ([_proc(2, "h2", KILL, 1.0)], SUCCEEDED, None, []),
        ([_proc(2, "h2", KILL, 1.0)], "stopped", None, []),
    ],
)
def test_which_failures_count_against_a_host(procs, status, hang, faults):
    assert attributed(_attempt(procs, status, hang)) == faults


def test_a_host_is_due_after_n_failures_a_lost_one_at_once():
    killed = _attempt([_proc(2, "h2", KILL, 1.0)])
    lost = _attempt([_proc(4, "h3", 255, 1.0, reason="connection to h3 lost (no answer for 30 s)", lost=True)])
    faults = HostFaults(2)
    faults.add(killed)
    assert faults.due([], 1) == []
    faults.add(killed)
    faults.add(lost)
    assert faults.due([], 3) == [
        Exclusion("h2", "2 failures (rank 2 killed by SIGKILL, rank 2 killed by SIGKILL)", "restart", 3),
        Exclusion("h3", "host lost (rank 4: connection to h3 lost (no answer for 30 s))", "restart", 3),
    ]
    assert [e.host for e in faults.due(["h2"], 3)] == ["h3"]  # already left out: not again
    never = HostFaults(0)
    for _ in range(5):
        never.add(killed)
    assert never.due([], 5) == []


@pytest.mark.parametrize(
    "old,new,sched,text",
    [
        (
            [(0, "h1"), (1, "h1"), (2, "h2"), (3, "h2")],
            [(0, "h1"), (1, "h1"), (2, "h3"), (3, "h3")],
            ("h1", "h1"),
            "ranks 2-3 move to h3",
        ),
        (
            [(0, "h1"), (1, "h2")],
            [(0, "h2"), (1, "h3")],
            ("h1", "h2"),
            "rank 0 moves to h2, rank 1 to h3; the scheduler moves to h2",
        ),
        (
            [(0, "h1"), (1, "h2"), (2, "h2"), (4, "h2")],
            [(0, "h1"), (1, "h3"), (2, "h3"), (4, "h3")],
            (None, None),
            "ranks 1-2,4 move to h3",
        ),
        ([(0, "h1")], [(0, "h1")], ("h1", "h1"), ""),
    ],
)
def test_moves_text(old, new, sched, text):
    assert moves_text(old, new, *sched) == text


# ---------------------------------------------------------------- the supervisor's restart path

HOSTS = ("h1", "h2", "h3")


def host_plan(job_dir: str, np: int = 4, excluded: Sequence[Exclusion] = (), slots: int = 2) -> Plan:
    """``np`` ranks filling HOSTS (``slots`` each) in order, without the excluded ones (as
    :func:`launcher.planning.spares.replan` places them); PlanError when too few are left."""
    gone = {e.host for e in excluded}
    free = [h for h in HOSTS if h not in gone for _ in range(slots)]
    if len(free) < np:
        raise PlanError(f"no spare host for {np} ranks without {', '.join(sorted(gone))}", field="--hosts")
    procs = tuple(
        ProcPlan(
            f"rank {r}", "worker", free[r], r, r % slots, 0, None, ("train",), (), job_dir, f"{job_dir}/worker_{r}.log"
        )
        for r in range(np)
    )
    return Plan("j1", job_dir, "dynamic", "fake", np, (), procs, None, (), None, None, excluded=tuple(excluded))


class Faults:
    """Backends per attempt: in attempt k, the first rank on host ``kills(k)`` dies by SIGKILL
    (``(host, code)``: exits with that code, which blames no host; None: every rank exits 0)."""

    def __init__(self, kills: Callable[[int], Any]) -> None:
        self.kills = kills
        self.plans: List[Plan] = []
        self.events: List[Tuple[str, Dict[str, Any]]] = []

    def factory(self, attempt: int, adir: str, plan: Plan) -> FakeBackend:
        self.plans.append(plan)
        what = self.kills(attempt)
        host, code = (what, KILL) if isinstance(what, str) else (what or (None, 0))
        victim = min((p.rank for p in plan.ranks if p.host == host), default=None)

        class Backend(FakeBackend):
            def start(self, proc: ProcPlan, log_path: str, cwd: str) -> FakeProcess:
                handle = super().start(proc, log_path, cwd)
                handle.exited(code if proc.rank == victim else 0)
                return handle

        return Backend()

    def event(self, event: Event) -> None:
        self.events.append((event.kind, event.to_json()))


class BadHost(Faults):
    """Backends per attempt in which the first rank on ``bad`` dies by SIGKILL; every other rank exits 0."""

    def __init__(self, bad: str = "h2") -> None:
        super().__init__(lambda attempt: bad)
        self.bad = bad


def _supervise(tmp_path, job: BadHost, replan: Any, progress: Optional[AttemptProgress] = None, **options: Any):
    plan = host_plan(str(tmp_path / "job"))
    spares = Spares(replan, options.pop("host_failures", 2)) if replan is not None else None
    sup = Supervisor(
        plan, job.factory, SuperviseOptions(grace=1.0, **options), on_event=job.event, spares=spares, progress=progress
    )
    return sup.run()


def test_a_host_failing_twice_is_left_out_and_the_job_succeeds_on_the_spare(tmp_path):
    job = BadHost()
    result = _supervise(tmp_path, job, lambda ex: host_plan(str(tmp_path / "job"), excluded=ex), max_restarts=3)
    assert (result.status, result.exit_code, result.attempts) == (SUCCEEDED, 0, 3)
    # attempts 0 and 1 ran on h1+h2 (h3 spare), attempt 2 on h1+h3
    assert [sorted({p.host for p in plan.ranks}) for plan in job.plans] == [["h1", "h2"], ["h1", "h2"], ["h1", "h3"]]
    assert {p.host for p in result.processes} == {"h1", "h3"}
    assert [a.replanned for a in result.history] == [False, False, True]
    excluded = [d for k, d in job.events if k == "host_excluded"]
    assert excluded == [
        {
            "host": "h2",
            "reason": "2 failures (rank 2 killed by SIGKILL, rank 2 killed by SIGKILL)",
            "by": "restart",
            "attempt": 2,
            "moves": "ranks 2-3 move to h3",
        }
    ]
    kinds = [k for k, _ in job.events]
    assert kinds.index("host_excluded") < len(kinds) - 1 - kinds[::-1].index(
        "restart"
    )  # announced before the last restart
    summary = result.to_json()
    assert summary["excluded_hosts"] == [{"host": "h2", "reason": excluded[0]["reason"], "by": "restart", "attempt": 2}]
    assert summary["attempt_results"][2]["replanned"] is True


def test_exclusions_of_the_plan_so_far_are_kept(tmp_path):
    """A host the pre-flight check left out stays out when a restart leaves out another."""
    job = BadHost()
    asked: List[Tuple[str, ...]] = []

    def replan(ex: Sequence[Exclusion]) -> Plan:
        asked.append(tuple(e.host for e in ex))
        return host_plan(str(tmp_path / "job"), np=2, excluded=ex)

    first = host_plan(str(tmp_path / "job"), np=2, excluded=(Exclusion("h1", "slow", "preflight", 0),))
    sup = Supervisor(
        first, job.factory, SuperviseOptions(grace=1.0, max_restarts=3), on_event=job.event, spares=Spares(replan, 1)
    )
    result = sup.run()
    assert asked == [("h1", "h2")]
    assert (result.status, [e["host"] for e in result.to_json()["excluded_hosts"]]) == (SUCCEEDED, ["h1", "h2"])
    assert {p.host for p in result.processes} == {"h3"}


def test_without_a_spare_the_job_stops_with_one_line(tmp_path):
    job = BadHost()
    result = _supervise(tmp_path, job, lambda ex: host_plan(str(tmp_path / "job"), np=6, excluded=ex), max_restarts=3)
    assert (result.status, result.exit_code, result.attempts) == (FAILED, 128 + signal.SIGKILL, 2)
    assert result.message == "--hosts: no spare host for 6 ranks without h2"
    assert result.extra["restarts_stopped"] == result.message
    assert ("stop_restarts", {"message": result.message}) in job.events
    assert not any(k == "host_excluded" for k, _ in job.events)


def test_no_replan_without_spares_support_and_none_before_n(tmp_path):
    job = BadHost()
    result = _supervise(tmp_path, job, None, max_restarts=2)
    assert (result.status, result.attempts) == (FAILED, 3)
    assert all(sorted({p.host for p in plan.ranks}) == ["h1", "h2"] for plan in job.plans)
    job = BadHost()
    result = _supervise(
        tmp_path, job, lambda ex: host_plan(str(tmp_path / "job2"), excluded=ex), max_restarts=2, host_failures=3
    )
    assert (result.status, result.attempts) == (FAILED, 3)  # the third failure came with no restart left
    assert not any(k == "host_excluded" for k, _ in job.events)


def _stuck_at_step(progress: AttemptProgress, step: int, attempts: int) -> AttemptProgress:
    progress.on_records([{"kind": "step", "attempt": k, "global_step": step} for k in range(attempts)])
    return progress


def test_a_replanned_attempt_restarts_the_crash_loop_count(tmp_path):
    """Every attempt logs step 5 and dies: without spares the third attempt stops the job as a
    crash loop; with --host-failures 3 the host is left out instead and the fourth attempt runs on
    the spare (the crash-loop count starts afresh there)."""
    job = BadHost()
    result = _supervise(tmp_path, job, None, progress=_stuck_at_step(AttemptProgress(), 5, 4), max_restarts=5)
    assert (result.status, result.attempts) == (FAILED, 3)
    assert result.extra["restarts_stopped"] == "attempts 1 and 2 got no further than step 5: not restarting"
    job = BadHost()
    result = _supervise(
        tmp_path,
        job,
        lambda ex: host_plan(str(tmp_path / "job2"), excluded=ex),
        progress=_stuck_at_step(AttemptProgress(), 5, 4),
        max_restarts=5,
        host_failures=3,
    )
    assert (result.status, result.attempts) == (SUCCEEDED, 4)
    assert "restarts_stopped" not in result.extra
    assert result.history[3].replanned is True and result.history[3].best_step == 5


def test_a_replan_rewrites_plan_json_and_the_hostfile_and_keeps_the_log_names(tmp_path):
    """What the runner does between attempts (mpirun: the hostfile is generated again); the logs
    commands still find every rank's log by the names plan.json records."""
    from launcher.execution.runner import replan_writing, write_plan_files
    from launcher.logs.joblogs import recorded_logs
    from launcher.planning.build import build_plan
    from launcher.planning.inventory.hostfile import parse_hostfile
    from launcher.planning.job.mpirun_options import MpiOptions
    from launcher.planning.job.spec import JobSpec
    from launcher.planning.spares import replan

    job = str(tmp_path / "job")
    spec = JobSpec(
        inventory=parse_hostfile("n1 slots=2\nn2 slots=2\nn3 slots=2\n", "h.txt"),
        program=("train.py",),
        python="/usr/bin/python3",
        cwd=str(tmp_path),
        job_dir=job,
        job_id="j1",
        np=4,
        launcher="mpirun",
        wrapper="/t/mslaunch-rank.sh",
        method="mpi",
        mpi=MpiOptions(hostfile=f"{job}/hostfile"),
    )
    first = build_plan(spec)
    (tmp_path / "job").mkdir()
    write_plan_files(first)
    logs_before = recorded_logs(job)
    gone = Exclusion("n2", "2 failures (rank 2 killed by SIGKILL, rank 2 killed by SIGKILL)", "restart", 2)
    plan = replan_writing(lambda ex: replan(spec, ex, 4))([gone])
    hosts = lambda text: [line.split()[0] for line in text.splitlines() if line and not line.startswith("#")]  # noqa: E731  (a one-line local helper)
    assert hosts((tmp_path / "job" / "hostfile").read_text()) == ["n1", "n3"] == sorted({p.host for p in plan.ranks})
    doc = json.loads((tmp_path / "job" / "plan.json").read_text())
    assert doc["excluded_hosts"] == [gone.to_json()] and [p["host"] for p in doc["ranks"]] == ["n1", "n1", "n3", "n3"]
    assert recorded_logs(job) == logs_before and len(logs_before) == 4


def test_failures_count_in_a_row_progress_on_a_host_clears_its_earlier_ones():
    """A long job's faults land now and then on any host: a host the job trained new steps on
    since its failure is not excluded by its next one; a host that fails every attempt before the
    job gets further (a crash loop) is."""
    from dataclasses import replace

    def kill_on(host: str, k: int, best: Optional[int]) -> AttemptResult:
        procs = [_proc(0, "h1", -15, 2.0, torn=True), _proc(1, host, KILL, 1.0)]
        return replace(_attempt(procs, k=k), best_step=best)

    spread = HostFaults(2)
    spread.add(kill_on("h2", 0, 10))  # h2's first failure
    spread.add(kill_on("h3", 1, 20))  # the job trained steps 11-20 on h2 too: h2's failure is cleared
    spread.add(kill_on("h2", 2, 30))
    assert spread.due([], 3) == [] and spread.cleared == {"h2": 1}
    assert [f.what for f in spread.faults["h2"]] == ["rank 1 killed by SIGKILL"]

    loop = HostFaults(2)  # no step past 10 between the failures: they count together
    for k, best in enumerate((10, 10)):
        loop.add(kill_on("h2", k, best))
    assert [e.host for e in loop.due([], 2)] == ["h2"]
    unknown = HostFaults(2)  # a job that logs no steps: nothing clears (as before)
    for k in range(2):
        unknown.add(kill_on("h2", k, None))
    assert [e.host for e in unknown.due([], 2)] == ["h2"]


# ------------------------------------------------------------------ elastic: --min-hosts, --rejoin-after


def elastic_plan(job_dir: str, excluded: Sequence[Exclusion] = (), planned: int = 6, min_hosts: int = 1) -> Plan:
    """As :func:`launcher.planning.spares.replan` with ``min_hosts``: every slot of the hosts left,
    up to ``planned`` ranks (HOSTS, 2 slots each)."""
    gone = {e.host for e in excluded}
    left = [h for h in HOSTS if h not in gone]
    if len(left) < min_hosts:
        raise PlanError(f"{len(left)} hosts left, fewer than --min-hosts {min_hosts}", field="--min-hosts")
    np = min(planned, 2 * len(left))
    plan = host_plan(job_dir, np=np, excluded=excluded)
    return Plan(**{**plan.__dict__, "planned_world_size": planned if np != planned else 0})


def _elastic_run(tmp_path, job: Faults, min_hosts: int = 1, **spares_kw: Any):
    """Supervise the 6-rank :func:`elastic_plan` job (``--host-failures 1``, 3 restarts) through ``job``."""
    job_dir = str(tmp_path / "job")
    spares = Spares(lambda ex: elastic_plan(job_dir, ex, min_hosts=min_hosts), 1, **spares_kw)
    options = SuperviseOptions(grace=1.0, max_restarts=3)
    return Supervisor(elastic_plan(job_dir), job.factory, options, on_event=job.event, spares=spares).run()


def test_without_a_spare_the_job_goes_on_smaller_then_grows_back_when_the_host_answers(tmp_path):
    job = Faults({0: "h2", 1: ("h1", 3)}.get)  # h2 fails (left out at once: --host-failures 1), then a rank on h1
    result = _elastic_run(tmp_path, job, rejoin_after=0.0, reachable=lambda host: True)
    assert (result.status, result.attempts) == (SUCCEEDED, 3)
    assert [(p.world_size, p.planned_size, sorted({r.host for r in p.ranks})) for p in job.plans] == [
        (6, 6, ["h1", "h2", "h3"]),
        (4, 6, ["h1", "h3"]),
        (6, 6, ["h1", "h2", "h3"]),
    ]
    resized = [d for k, d in job.events if k == "resized"]
    assert resized == [
        {
            "attempt": 1,
            "world_size": 4,
            "previous": 6,
            "planned": 6,
            "hosts": 2,
            "why": "h2: 1 failure (rank 2 killed by SIGKILL)",
        },
        {"attempt": 2, "world_size": 6, "previous": 4, "planned": 6, "hosts": 3, "why": "back: h2"},
    ]
    rejoined = [d for k, d in job.events if k == "host_rejoined"]
    assert rejoined == [{"host": "h2", "attempt": 2, "left_out": "1 failure (rank 2 killed by SIGKILL)"}]
    summary = result.to_json()
    assert summary["resized"] == resized and "excluded_hosts" not in summary


def test_below_min_hosts_the_job_stops_with_the_one_line(tmp_path):
    job = Faults({0: "h2", 1: "h1"}.get)
    result = _elastic_run(tmp_path, job, min_hosts=2, rejoin_after=None)
    assert (result.status, result.attempts) == (FAILED, 2)
    assert result.message == "--min-hosts: 1 hosts left, fewer than --min-hosts 2"
    assert [k for k, _ in job.events].count("resized") == 1


def test_a_host_left_out_comes_back_after_its_cooldown_doubling_each_time_and_only_when_it_answers():
    now = [0.0]
    answers = {"h2": False}
    plans: List[Tuple[str, ...]] = []

    def replan(ex: Sequence[Exclusion]) -> Plan:
        plans.append(tuple(e.host for e in ex))
        return elastic_plan("/j", ex)

    spares = Spares(replan, 1, rejoin_after=10.0, reachable=lambda h: answers[h], clock=lambda: now[0])
    plan = elastic_plan("/j")
    lose_h2 = _attempt([_proc(2, "h2", 255, 1.0, reason="connection to h2 lost", lost=True)])
    other = _attempt([_proc(0, "h1", 1, 1.0)])  # an exit code: blames no host

    nxt = spares.after(lose_h2, plan, 1)
    assert nxt is not None and [e.host for e in nxt.excluded] == ["h2"] and nxt.plan.world_size == 4
    plan = nxt.plan
    now[0] = 9.0
    assert spares.after(other, plan, 2) is None  # within its cooldown
    now[0] = 11.0
    assert spares.after(other, plan, 3) is None  # over, but it does not answer
    answers["h2"] = True
    nxt = spares.after(other, plan, 4)
    assert nxt is not None and [e.host for e in nxt.rejoined] == ["h2"] and nxt.plan.world_size == 6
    plan = nxt.plan
    nxt = spares.after(lose_h2, plan, 5)  # lost again at t=11: its cooldown is now 20 s
    assert nxt is not None
    plan = nxt.plan
    now[0] = 30.0
    assert spares.after(other, plan, 6) is None
    now[0] = 31.0
    nxt = spares.after(other, plan, 7)
    assert nxt is not None and nxt.plan.world_size == 6
    assert plans == [("h2",), (), ("h2",), ()]


@pytest.mark.parametrize("h3_answers, left_out", [(False, ["h2", "h3"]), (True, ["h2"])])
def test_a_host_found_lost_during_the_teardown_is_left_out_when_it_does_not_answer(h3_answers, left_out):
    """Two hosts behind one switch: h2 is lost first (the teardown starts), h3 is found lost during it."""
    asked: List[str] = []

    def reachable(host: str) -> bool:
        asked.append(host)
        return h3_answers

    spares = Spares(lambda ex: elastic_plan("/j", ex), 2, reachable=reachable)
    lost = "connection to {} lost (no answer for 5 s)"
    result = _attempt(
        [
            _proc(0, "h1", -15, 2.0, torn=True),
            _proc(2, "h2", 255, 1.0, reason=lost.format("h2"), lost=True),
            _proc(4, "h3", 255, 2.0, torn=True, reason=lost.format("h3"), lost=True),
        ]
    )
    nxt = spares.after(result, elastic_plan("/j"), 1)
    assert nxt is not None and [e.host for e in nxt.excluded] == left_out
    assert asked == ["h3"]  # only the host torn down while lost is asked; h1 (torn down, fine) is not
    if not h3_answers:
        assert nxt.excluded[1].reason == f"host lost (rank 4: {lost.format('h3')}; no answer at the restart)"
    assert Spares(lambda ex: elastic_plan("/j", ex), 2).after(result, elastic_plan("/j"), 1).excluded[0].host == "h2"


# ------------------------------------------------------------------ planned restarts


class Planned:
    """Backends per attempt whose ranks run until torn down; when attempt ``at`` has started,
    ``ask`` asks for a planned restart; in the attempts after it every rank exits 0."""

    def __init__(self, planned: Any, at: int, ask: Any, base: Any = FakeBackend) -> None:
        self.planned, self.at, self.ask, self.base = planned, at, ask, base
        self.plans: List[Plan] = []
        self.backends: List[FakeBackend] = []
        self.events: List[Tuple[str, Dict[str, Any]]] = []

    def factory(self, attempt: int, adir: str, plan: Plan) -> FakeBackend:
        self.plans.append(plan)
        job = self

        class Backend(self.base):  # type: ignore[name-defined]  # the test's base backend
            def start(self, proc: ProcPlan, log_path: str, cwd: str) -> FakeProcess:
                handle = super().start(proc, log_path, cwd)
                if attempt > job.at:
                    handle.exited(0)
                elif attempt == job.at and proc.rank == max(p.rank for p in plan.ranks):
                    job.ask(job.planned)
                return handle

        backend = Backend()
        self.backends.append(backend)
        return backend

    def event(self, event: Event) -> None:
        self.events.append((event.kind, event.to_json()))


def _planned_job(tmp_path, ask, plan, replan, base: Any = FakeBackend, **spares_kw):
    from launcher.execution.supervision.hangwatch import HangWatch
    from launcher.execution.supervision.planned import PlannedRestarts
    from launcher.logs.hang import HangPolicy

    hang = HangWatch(HangPolicy.parse("off", None, "off"))
    hang.planned = PlannedRestarts()
    job = Planned(hang.planned, 0, ask, base)
    spares = Spares(replan, 2, **spares_kw)
    sup = Supervisor(plan, job.factory, SuperviseOptions(grace=1.0), on_event=job.event, spares=spares, hang=hang)
    return job, sup.run(), spares


def test_a_planned_restart_leaves_the_straggler_out_at_once_without_counting_as_a_restart(tmp_path):
    from launcher.execution.supervision.planned import PlannedRequest

    job_dir = str(tmp_path / "job")
    why = "straggler: rank 2 on h2 waited for CPU 97 % of its runnable time"
    ask = lambda planned: planned.request(PlannedRequest(f"leaving out h2: {why}", (("h2", why),)))  # noqa: E731
    job, result, spares = _planned_job(
        tmp_path, ask, host_plan(job_dir), lambda ex: host_plan(job_dir, excluded=ex), rejoin_after=0.0
    )
    assert (result.status, result.attempts) == (SUCCEEDED, 2)  # --max-restarts 0: a planned restart is not one
    first = result.history[0]
    assert (first.status, first.exit_code, first.leave_out) == ("planned", 0, (("h2", why),))
    assert first.message == f"planned restart: leaving out h2: {why}"
    assert all(p.torn_down for p in first.processes)  # every rank told, then torn down
    assert (tmp_path / "job" / "stopping").read_text() == "planned\n"  # what the ranks read: save, no fault
    assert [sorted({r.host for r in p.ranks}) for p in job.plans] == [["h1", "h2"], ["h1", "h3"]]
    kinds = [k for k, _ in job.events]
    assert kinds.index("planned_restart") < kinds.index("host_excluded") < kinds.index("restart")
    excluded = [d for k, d in job.events if k == "host_excluded"]
    assert [(d["host"], d["reason"]) for d in excluded] == [("h2", why)]
    assert spares.never_back == {"h2"} and spares.cooldown_over(job.plans[1].excluded) == []  # slow: not back


def test_a_planned_restart_that_grows_takes_the_host_back(tmp_path):
    """Attempt 0 loses h3 (the job goes on smaller); while attempt 1 runs, h3 answers and a planned
    restart is asked for (the grow watch's request): attempt 2 runs at the planned size again."""
    from launcher.execution.supervision.hangwatch import HangWatch
    from launcher.execution.supervision.planned import PlannedRequest, PlannedRestarts
    from launcher.logs.hang import HangPolicy

    job_dir = str(tmp_path / "job")
    hang = HangWatch(HangPolicy.parse("off", None, "off"))
    planned = hang.planned = PlannedRestarts()
    plans: List[Plan] = []
    events_seen: List[Tuple[str, Dict[str, Any]]] = []

    def factory(attempt: int, adir: str, plan: Plan) -> FakeBackend:
        plans.append(plan)
        last = max(p.rank for p in plan.ranks)

        class Backend(FakeBackend):
            def start(self, proc: ProcPlan, log_path: str, cwd: str) -> FakeProcess:
                handle = super().start(proc, log_path, cwd)
                if attempt == 0 and proc.host == "h3":
                    handle.host_lost = "connection to h3 lost (closed)"
                    handle.exited(255)
                elif attempt == 1 and proc.rank == last:
                    planned.request(PlannedRequest("h3 answers again: growing back to 6 ranks"))
                elif attempt == 2:
                    handle.exited(0)
                return handle

        return Backend()

    spares = Spares(lambda ex: elastic_plan(job_dir, ex), 2, rejoin_after=0.0, reachable=lambda host: True)
    sup = Supervisor(
        elastic_plan(job_dir),
        factory,
        SuperviseOptions(grace=1.0, max_restarts=1),
        on_event=lambda e: events_seen.append((e.kind, e.to_json())),
        spares=spares,
        hang=hang,
    )
    result = sup.run()
    assert (result.status, [a.status for a in result.history]) == (SUCCEEDED, ["failed", "planned", "succeeded"])
    assert [(p.world_size, sorted({r.host for r in p.ranks})) for p in plans] == [
        (6, ["h1", "h2", "h3"]),
        (4, ["h1", "h2"]),
        (6, ["h1", "h2", "h3"]),
    ]
    assert [d["world_size"] for k, d in events_seen if k == "resized"] == [4, 6]
    assert ("planned_restart", {"reason": "h3 answers again: growing back to 6 ranks"}) in events_seen


def test_a_stop_signal_during_a_planned_restart_stops_the_job(tmp_path):
    """mslaunch is told to stop (SIGTERM recorded while the planned attempt tears down): no restart,
    and the job ends ``stopped`` with 143, not ``planned``."""
    import signal as sig

    from launcher.execution import stopsignals
    from launcher.execution.supervision.planned import PlannedRequest

    job_dir = str(tmp_path / "job")

    class Stopping(FakeBackend):
        def start(self, proc: ProcPlan, log_path: str, cwd: str) -> FakeProcess:
            handle = super().start(proc, log_path, cwd)
            original = handle.terminate

            def terminate() -> None:
                stopsignals.pending.append(sig.SIGTERM)  # as the handler records it
                original()

            handle.terminate = terminate  # type: ignore[method-assign]
            return handle

    ask = lambda planned: planned.request(PlannedRequest("leaving out h2: slow", (("h2", "straggler: slow"),)))  # noqa: E731
    try:
        _, result, _ = _planned_job(
            tmp_path, ask, host_plan(job_dir), lambda ex: host_plan(job_dir, excluded=ex), base=Stopping
        )
    finally:
        stopsignals.pending.clear()
    assert (result.status, result.exit_code, result.attempts) == ("stopped", 143, 1)
