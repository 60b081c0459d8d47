"""The supervisor against an in-memory backend: fail fast, teardown order, restarts, timeout,
root cause, start failures (see :mod:`tests.execution.fakebackend`)."""

from __future__ import annotations

import json
import os
import signal
from typing import Any, Dict, List, Tuple

import pytest

from launcher.errors import LaunchError
from launcher.execution.results import FAILED, PREEMPTED, STOPPED, SUCCEEDED, TIMEOUT, TIMEOUT_EXIT
from launcher.execution.settings import SuperviseOptions
from launcher.execution.supervision.supervisor import Supervisor
from launcher.planning.job.events import Event, Restart
from tests.execution.fakebackend import Exit, FakeBackend, FakeProcess, fake_plan


class Recorder:
    """Backends per attempt (``scripts[k]`` configures attempt k) and the supervisor's events."""

    def __init__(self, *scripts: Dict[str, Any]) -> None:
        self.scripts = scripts
        self.backends: List[FakeBackend] = []
        self.events: List[Tuple[str, Dict[str, Any]]] = []  # (kind, its events.jsonl data)
        self.typed: List[Event] = []
        self.backend_class = FakeBackend

    def factory(self, attempt: int, adir: str, plan: Any = None) -> FakeBackend:
        config = self.scripts[min(attempt, len(self.scripts) - 1)]
        if "raise" in config:
            raise LaunchError(config["raise"])
        backend = self.backend_class(**config)
        self.backends.append(backend)
        return backend

    def event(self, event: Event) -> None:
        self.typed.append(event)
        self.events.append((event.kind, event.to_json()))


def supervise(tmp_path, recorder: Recorder, scheduler: bool = False, **options: Any):
    plan = fake_plan(str(tmp_path / "job"), scheduler=scheduler)
    sup = Supervisor(
        plan, recorder.factory, SuperviseOptions(grace=options.pop("grace", 5.0), **options), on_event=recorder.event
    )
    return sup.run()


def test_success_starts_in_plan_order_and_closes_the_backend(tmp_path):
    rec = Recorder({"script": {n: Exit(0) for n in ("rank 0", "rank 1", "rank 2")}})
    result = supervise(tmp_path, rec)
    assert (result.status, result.exit_code, result.attempts, result.root_cause) == (SUCCEEDED, 0, 1, None)
    (backend,) = rec.backends
    assert [c for c in backend.calls if c[0] == "start"] == [
        ("start", "rank 0"),
        ("start", "rank 1"),
        ("start", "rank 2"),
    ]
    assert [c for c in backend.calls if c[0] == "terminate"] == []  # nothing left running: nothing to terminate
    assert backend.closed
    assert [k for k, _ in rec.events if k != "exited"] == ["started", "started", "started"]
    assert rec.events[0][1] == {
        "name": "rank 0",
        "rank": 0,
        "host": "localhost",
        "pid": rec.events[0][1]["pid"],
        "log": rec.events[0][1]["log"],
        "attempt": 0,
    }
    exits = sorted((d["name"], d["returncode"], d["attempt"]) for k, d in rec.events if k == "exited")
    assert exits == [("rank 0", 0, 0), ("rank 1", 0, 0), ("rank 2", 0, 0)]  # each exit once: what status shows


def test_fail_fast_tears_down_the_others_in_order(tmp_path):
    rec = Recorder({"script": {"rank 1": Exit(3)}})
    result = supervise(tmp_path, rec)
    assert (result.status, result.exit_code) == (FAILED, 3)
    assert result.root_cause is not None and result.root_cause.name == "rank 1"
    assert result.message == "rank 1 on localhost failed: exit code 3"
    backend = rec.backends[0]
    # SIGTERM to the running ones (in start order), then SIGKILL to every group.
    assert [c for c in backend.calls if c[0] != "start"] == [
        ("terminate", "rank 0"),
        ("terminate", "rank 2"),
        ("kill", "rank 0"),
        ("kill", "rank 1"),
        ("kill", "rank 2"),
    ]
    by_name = {p.name: p for p in result.processes}
    assert by_name["rank 1"].returncode == 3 and not by_name["rank 1"].torn_down
    assert by_name["rank 0"].torn_down and by_name["rank 0"].signal == "SIGTERM"
    events = [(k, d) for k, d in rec.events if k != "exited"]
    assert [k for k, _ in events] == ["started", "started", "started", "failure", "teardown"]
    assert events[3][1] == {"name": "rank 1", "host": "localhost", "returncode": 3}
    assert events[4][1] == {"names": ["rank 0", "rank 2"]}
    exits = [(d["name"], d["returncode"]) for k, d in rec.events if k == "exited"]
    assert exits[0] == ("rank 1", 3) and sorted(n for n, _ in exits) == ["rank 0", "rank 1", "rank 2"]


class _SeesOthers(FakeProcess):
    """Records, when it is asked to end, which processes of its attempt had ended."""

    def terminate(self) -> None:
        ended = ",".join(h.plan.name for h in self.backend.handles if h.has_exited())
        self.backend.calls.append(("ended before", ended))
        super().terminate()


class _SeesOthersBackend(FakeBackend):
    handle_class = _SeesOthers


@pytest.mark.parametrize("stubborn", [set(), {"rank 2"}])
def test_the_scheduler_is_ended_after_the_workers_which_may_need_it_for_their_last_step(tmp_path, stubborn):
    # A worker that ends gracefully saves at its step's end: that step may still need the
    # scheduler (the barrier, the rendezvous).  So the scheduler is asked last, once the workers
    # ended, or once the grace is over for a worker that does not end.
    rec = Recorder({"script": {"rank 1": Exit(3)}, "stubborn": stubborn})
    rec.backend_class = _SeesOthersBackend
    result = supervise(tmp_path, rec, scheduler=True, grace=0.3)
    assert result.status == FAILED and result.root_cause is not None and result.root_cause.name == "rank 1"
    calls = [c for c in rec.backends[0].calls if c[0] not in ("start", "kill")]
    after_grace = "rank 0,rank 1" if stubborn else "rank 0,rank 1,rank 2"  # a stubborn rank 2 outlives the grace
    assert calls == [
        ("ended before", "rank 1"),
        ("terminate", "rank 0"),
        ("ended before", "rank 0,rank 1"),
        ("terminate", "rank 2"),
        ("ended before", after_grace),
        ("terminate", "scheduler"),
    ]
    by_name = {p.name: p for p in result.processes}
    assert by_name["scheduler"].torn_down and by_name["scheduler"].signal == "SIGTERM"
    assert by_name["rank 2"].signal == ("SIGKILL" if stubborn else "SIGTERM")


def test_root_cause_is_the_earliest_exit_not_the_first_reported(tmp_path):
    # rank 0 is started (and reported) first, but rank 2 exited earlier.
    rec = Recorder({"script": {"rank 0": Exit(4, exit_time=2000.0), "rank 2": Exit(-9, exit_time=1000.0)}})
    result = supervise(tmp_path, rec)
    assert result.status == FAILED
    assert result.root_cause is not None and result.root_cause.name == "rank 2"
    assert result.root_cause.reason == "killed by SIGKILL" and result.exit_code == 137


def test_restart_after_a_failure_keeps_every_attempt(tmp_path):
    rec = Recorder({"script": {"rank 0": Exit(2)}}, {"script": {n: Exit(0) for n in ("rank 0", "rank 1", "rank 2")}})
    result = supervise(tmp_path, rec, max_restarts=2)
    assert (result.status, result.attempts) == (SUCCEEDED, 2)
    assert [a.status for a in result.history] == [FAILED, SUCCEEDED]
    assert [a.log_dir for a in result.history] == [str(tmp_path / "job"), str(tmp_path / "job" / "attempt_1")]
    assert os.path.isdir(tmp_path / "job" / "attempt_1")
    restart = [e for e in rec.typed if isinstance(e, Restart)]
    assert len(restart) == 1 and restart[0].attempt == 1 and restart[0].cause is result.history[0].root_cause
    assert [d for k, d in rec.events if k == "restart"][0]["cause"]["name"] == "rank 0"
    assert all(b.closed for b in rec.backends) and len(rec.backends) == 2


def test_restarts_stop_at_max_restarts(tmp_path):
    rec = Recorder({"script": {"rank 2": Exit(1)}})
    result = supervise(tmp_path, rec, max_restarts=1)
    assert (result.status, result.exit_code, result.attempts) == (FAILED, 1, 2)


def test_timeout_tears_down_and_exits_124(tmp_path):
    rec = Recorder({})  # nothing ever exits by itself
    result = supervise(tmp_path, rec, timeout=0.2)
    assert (result.status, result.exit_code) == (TIMEOUT, TIMEOUT_EXIT)
    assert result.message == "the job ran past --timeout 0.2 s"
    assert all(p.torn_down for p in result.processes) and len(result.processes) == 3
    assert [k for k, _ in rec.events if k != "exited"][-2:] == ["timeout", "teardown"]


def test_a_job_the_cluster_preempts_is_preempted_not_failed_and_not_restarted(tmp_path):
    """Slurm signals the ranks of a preempted job itself: their deaths are not the job's failure."""
    rec = Recorder({"script": {"rank 1": Exit(143)}, "outside": ("preempted", "Slurm preempted job 5 at T")})
    result = supervise(tmp_path, rec, max_restarts=2)
    assert (result.status, result.exit_code, result.attempts) == (PREEMPTED, 143, 1)
    assert result.message == "Slurm preempted job 5 at T" and result.root_cause is None
    events = [(k, d) for k, d in rec.events if k != "exited"]
    assert [k for k, _ in events] == ["started", "started", "started", "cluster_stop", "teardown"]
    assert events[3][1] == {"status": "preempted", "message": "Slurm preempted job 5 at T"}
    assert rec.backends[0].outside_asked == 1 and rec.backends[0].closed
    # rank 1 died of the scheduler's signal, the others were torn down: none failed by itself
    by_name = {p.name: p for p in result.processes}
    assert not any(p.failed for p in result.processes)
    assert (by_name["rank 1"].returncode, by_name["rank 1"].reason) == (143, "Slurm preempted job 5 at T")


def test_a_failure_is_judged_as_usual_when_the_cluster_is_not_ending_the_job(tmp_path):
    rec = Recorder({"script": {"rank 1": Exit(3)}})
    result = supervise(tmp_path, rec)
    assert (result.status, result.exit_code, result.root_cause.name) == (FAILED, 3, "rank 1")
    assert rec.backends[0].outside_asked == 1


def test_the_clusters_time_limit_is_a_timeout(tmp_path):
    rec = Recorder({"script": {"rank 0": Exit(-15)}, "outside": ("timeout", "Slurm job 5 reached its time limit")})
    result = supervise(tmp_path, rec)
    assert (result.status, result.exit_code, result.message) == (
        TIMEOUT,
        TIMEOUT_EXIT,
        "Slurm job 5 reached its time limit",
    )


def test_a_stop_signal_sent_by_the_cluster_names_the_cluster(tmp_path):
    """scancel: Slurm sends SIGTERM to mslaunch (through the batch script); the summary says who."""

    class SignalledBackend(FakeBackend):
        def start(self, proc, log_path, cwd):
            handle = super().start(proc, log_path, cwd)
            if proc.name == "rank 2":
                os.kill(os.getpid(), signal.SIGTERM)  # the supervisor's handler raises at once
            return handle

    backends: List[FakeBackend] = []

    def factory(attempt: int, adir: str, plan: Any = None) -> FakeBackend:
        backends.append(SignalledBackend(outside=("stopped", "Slurm cancelled job 5")))
        return backends[-1]

    events: List[str] = []
    sup = Supervisor(
        fake_plan(str(tmp_path / "job")), factory, SuperviseOptions(grace=1.0), on_event=lambda e: events.append(e.kind)
    )
    result = sup.run()
    assert (result.status, result.exit_code, result.message) == (STOPPED, 143, "Slurm cancelled job 5")
    assert "cluster_stop" in events and "interrupted" not in events


def test_a_process_that_ignores_sigterm_is_killed_after_the_grace(tmp_path):
    rec = Recorder({"script": {"rank 0": Exit(1)}, "stubborn": {"rank 1"}})
    result = supervise(tmp_path, rec, grace=0.1)
    by_name = {p.name: p for p in result.processes}
    assert by_name["rank 1"].signal == "SIGKILL" and by_name["rank 1"].torn_down
    assert by_name["rank 2"].signal == "SIGTERM"


def test_start_failure_on_a_restart_is_recorded_in_that_attempt(tmp_path):
    ok = {"script": {n: Exit(0) for n in ("rank 0", "rank 1", "rank 2")}}
    rec = Recorder({"script": {"rank 1": Exit(3)}}, {"raise": "cannot connect to h1:22 (connection refused)"}, ok)
    result = supervise(tmp_path, rec, max_restarts=2)
    assert [a.status for a in result.history] == [FAILED, FAILED, SUCCEEDED]
    second = result.history[1]
    assert second.message == "attempt 1 could not start: cannot connect to h1:22 (connection refused)"
    assert second.exit_code == 1 and second.processes == ()
    summary = json.loads(json.dumps(result.to_json()))
    assert summary["attempt_results"][1]["message"] == second.message and summary["status"] == SUCCEEDED


def test_start_failure_on_the_last_attempt_fails_the_job(tmp_path):
    rec = Recorder({"script": {"rank 1": Exit(3)}}, {"raise": "cannot connect to h1:22"})
    result = supervise(tmp_path, rec, max_restarts=1)
    assert (result.status, result.exit_code, result.attempts) == (FAILED, 1, 2)
    assert result.message == "attempt 1 could not start: cannot connect to h1:22"


def test_set_up_failure_of_the_first_attempt_reaches_the_caller(tmp_path):
    rec = Recorder({"raise": "cannot connect to h1:22"})
    with pytest.raises(LaunchError, match="cannot connect to h1:22"):
        supervise(tmp_path, rec, max_restarts=3)


def test_a_process_that_cannot_start_fails_the_attempt_and_the_started_ones_are_torn_down(tmp_path):
    rec = Recorder({"fail_start": {"rank 1": "rank 1: cannot run 'train': no such file"}})
    result = supervise(tmp_path, rec)
    assert (result.status, result.exit_code) == (FAILED, 1)
    assert result.message == "rank 1: cannot run 'train': no such file"
    by_name = {p.name: p for p in result.processes}
    assert by_name["rank 1"].reason == "rank 1: cannot run 'train': no such file"
    assert by_name["rank 0"].torn_down and "rank 2" not in by_name  # nothing after the failure starts
    assert result.root_cause is not None and result.root_cause.name == "rank 1"


class _ReportingProcess(FakeProcess):
    """A handle that reports its exit through ``notify_exit``; ``wait()`` must not be called."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._callbacks: List[Any] = []
        self.waited = False

    def notify_exit(self, callback) -> bool:
        if self._done.is_set():
            callback(self._rc)
        else:
            self._callbacks.append(callback)
        return True

    def exited(self, rc: int, exit_time=None) -> None:
        first = not self._done.is_set()
        super().exited(rc, exit_time)
        if first:
            for cb in self._callbacks:
                cb(rc)

    def wait(self) -> int:
        self.waited = True
        raise AssertionError("the supervisor blocked a thread in wait()")


class _ReportingBackend(FakeBackend):
    handle_class = _ReportingProcess


def test_backends_that_report_exits_need_no_waiter_thread(tmp_path):
    backends: List[FakeBackend] = []

    def factory(attempt: int, adir: str, plan: Any = None) -> FakeBackend:
        backends.append(_ReportingBackend(script={"rank 1": Exit(3)}))
        return backends[-1]

    plan = fake_plan(str(tmp_path / "job"))
    result = Supervisor(plan, factory, SuperviseOptions(grace=5.0)).run()
    assert (result.status, result.exit_code) == (FAILED, 3)
    by_name = {p.name: p for p in result.processes}
    assert (
        by_name["rank 1"].returncode == 3
        and by_name["rank 0"].signal == "SIGTERM"
        and by_name["rank 2"].signal == "SIGTERM"
    )
    assert not any(h.waited for h in backends[0].handles)


@pytest.fixture
def runners(monkeypatch):
    """Every AttemptRunner the supervisor makes (their phases are read after the run)."""
    from launcher.execution.supervision import supervisor as supervisor_module

    made: List[Any] = []

    class Recorded(supervisor_module.AttemptRunner):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(supervisor_module, "AttemptRunner", Recorded)
    return made


def test_the_phases_of_a_successful_attempt(tmp_path, runners):
    from launcher.execution.supervision.phases import AttemptPhase as P

    rec = Recorder({"script": {n: Exit(0) for n in ("rank 0", "rank 1", "rank 2")}})
    assert supervise(tmp_path, rec).status == SUCCEEDED
    (runner,) = runners
    assert runner.state.phases == [P.STARTING, P.RUNNING, P.FINISHING, P.TEARING_DOWN, P.DONE]
    assert runner.phase is P.DONE


def test_the_phases_of_a_failed_attempt_and_of_its_restart(tmp_path, runners):
    from launcher.execution.supervision.phases import AttemptPhase as P

    rec = Recorder({"script": {"rank 1": Exit(3)}}, {"raise": "cannot connect to h1:22"})
    result = supervise(tmp_path, rec, max_restarts=1)
    assert [a.status for a in result.history] == [FAILED, FAILED]
    assert [r.state.phases for r in runners] == [
        [P.STARTING, P.RUNNING, P.TEARING_DOWN, P.DONE],  # a rank failed
        [P.STARTING, P.TEARING_DOWN, P.DONE],
    ]  # the restart could not start


def test_the_phases_of_a_timed_out_attempt(tmp_path, runners):
    from launcher.execution.supervision.phases import AttemptPhase as P

    assert supervise(tmp_path, Recorder({}), timeout=0.2).status == TIMEOUT
    assert runners[0].state.phases == [P.STARTING, P.RUNNING, P.TEARING_DOWN, P.DONE]
