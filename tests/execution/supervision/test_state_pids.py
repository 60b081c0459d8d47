"""A process's pid on its host, learnt after its start, becomes one ``pid`` event (AttemptState)."""

from __future__ import annotations

from launcher.execution.process.handle import ReportedProcess
from launcher.execution.supervision.state import AttemptState
from launcher.planning.job.events import Exited, Pid
from tests.execution.fakebackend import fake_plan


class Remote(ReportedProcess):
    """A rank on another host: its pid comes later (as the ssh agent's ``started`` message)."""

    def __init__(self, proc) -> None:
        self.plan, self.host, self.pid = proc, proc.host, None

    def notify_exit(self, callback) -> bool:
        self.on_exit = callback
        return True

    def terminate(self) -> None: ...

    def kill(self) -> None: ...


class StandIn(Remote):
    """One local process for ranks elsewhere (mpirun): it tells their pids itself."""

    def __init__(self, proc, pids) -> None:
        super().__init__(proc)
        self.pid, self.found = 77, pids

    def host_pids(self):
        return self.found


def test_a_pid_learnt_later_is_told_once_before_the_exit(tmp_path):
    plan = fake_plan(str(tmp_path), 2)
    told = []
    state = AttemptState(on_event=told.append, attempt=3)
    r0, r1 = Remote(plan.ranks[0]), Remote(plan.ranks[1])
    state.add(r0)
    state.add(r1)
    state.report_pids()
    assert told == []  # nothing known yet
    r0.pid = 4242
    state.drain(0)
    state.drain(0)
    assert told == [Pid(r0.plan.name, r0.plan.rank, r0.host, 4242, 3)]
    r1.pid = 99
    r1.on_exit(0)  # the pid came just before the exit: told before the ``exited`` event
    state.drain(1)
    assert told[1:] == [
        Pid(r1.plan.name, r1.plan.rank, r1.host, 99, 3),
        Exited(r1.plan.name, r1.plan.rank, r1.host, 0, 3),
    ]


def test_a_stand_in_tells_the_pids_of_the_ranks_it_runs_and_a_broken_helper_tells_nothing(tmp_path):
    plan = fake_plan(str(tmp_path), 2)
    told = []
    state = AttemptState(on_event=told.append)
    found = {"rank 0": (0, "h1", 11), "rank 1": (1, "h2", None)}
    standin = StandIn(plan.ranks[0], found)
    state.add(standin)
    state.report_pids()
    assert told == [Pid("rank 0", 0, "h1", 11, 0)]
    found["rank 1"] = (1, "h2", 12)
    state.report_pids()
    assert told[1:] == [Pid("rank 1", 1, "h2", 12, 0)]

    def broken():
        raise OSError("gone")

    standin.host_pids = broken
    state.report_pids()
    assert len(told) == 2
