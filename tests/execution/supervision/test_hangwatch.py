"""The hang watch's stopped-rank verdict (fake handles, a fake clock): which ranks count, the
limit, the longest stopped first, and ``--stopped-timeout off``."""

from __future__ import annotations

import time
from typing import Optional

from launcher.execution.process.handle import ReportedProcess
from launcher.execution.supervision.hangwatch import HangWatch
from launcher.logs.hang import HangPolicy
from launcher.planning.job.kinds import Role
from launcher.planning.job.spec import ProcPlan


class _Handle(ReportedProcess):
    def __init__(self, rank: Optional[int], stopped: Optional[float], role: Role = Role.WORKER) -> None:
        name = f"rank {rank}" if rank is not None else "scheduler"
        self.plan = ProcPlan(name, role, "h", rank, 0, 0, None, ("x",), (), "/", "/dev/null")
        self.host, self.log_path, self.started, self._stopped = "h", "/dev/null", time.time(), stopped

    def stopped_for(self, now: float) -> Optional[float]:
        return self._stopped

    def terminate(self) -> None:
        pass

    def kill(self) -> None:
        pass


def _watch(stopped: Optional[str] = "3") -> HangWatch:
    return HangWatch(HangPolicy.parse("off", None, stopped), clock=lambda: 50.0)


def test_the_longest_stopped_running_worker_past_the_limit_is_the_verdict():
    handles = [_Handle(None, 99.0, Role.SCHEDULER), _Handle(0, None), _Handle(1, 3.5), _Handle(2, 4.0)]
    watch = _watch()
    verdict = watch.stopped(handles, {})
    assert verdict is not None and (verdict.stopped_rank, verdict.idle, verdict.limit) == (2, 4.0, 3.0)
    assert verdict.derived == "--stopped-timeout 3 s"
    assert watch.stopped_for == {1: 3.5, 2: 4.0}  # the evidence the culprit is judged by
    assert _watch().stopped_for == {}  # a new watch knows nothing yet
    # an exited rank is not looked at; below the limit: no verdict (but what was seen is kept)
    watch = _watch()
    assert watch.stopped(handles, {3: (0, 0.0)}).stopped_rank == 1
    watch = _watch()
    assert watch.stopped([_Handle(0, 2.9)], {}) is None and watch.stopped_for == {0: 2.9}


def test_off_or_nothing_stopped_is_no_verdict():
    assert _watch("off").stopped([_Handle(0, 100.0)], {}) is None
    assert _watch().stopped([_Handle(0, None), _Handle(1, None)], {}) is None


def test_a_handle_that_fails_to_look_is_not_stopped():
    class Broken(_Handle):
        def stopped_for(self, now: float) -> Optional[float]:
            raise OSError("gone")

    assert _watch().stopped([Broken(0, None), _Handle(1, 5.0)], {}).stopped_rank == 1


def test_the_straggler_watch_begins_with_each_attempt_and_looks_along_even_with_the_stopped_watch_off():
    from types import SimpleNamespace

    looked: list = []
    watch = _watch("off")
    watch.stragglers = SimpleNamespace(  # type: ignore[assignment]  # a stand-in that records the calls
        begin=lambda attempt: looked.append(("begin", attempt)), look=lambda handles, exits: looked.append(len(handles))
    )
    watch.begin(3, [(0, "h")])
    assert watch.stopped([_Handle(0, None)], {}) is None
    assert looked == [("begin", 3), 1]
