"""Process handles: what the supervisor holds for each started process, on every backend.

A :class:`ProcessHandle` is one started process (or one that stands for many, like mpirun's):
``wait()`` blocks until it exited (subprocess convention: negative = killed by that signal; 255
with a ``reason`` when a connection was lost); ``poll()`` never blocks; ``terminate()``/``kill()``
are safe in every state (a group may outlive its leader); ``pid``/``pgid`` are None where a
backend has none (yet); ``has_exited()`` tells an exit that ``wait()`` has not reported yet.
:class:`ReportedProcess` is a handle whose exit is reported to it (the ssh backend's reader
thread, tests).  :class:`WatchdogLink` is what a started process needs of the job's watchdog.
"""

from __future__ import annotations

import os
import threading
from abc import ABC, abstractmethod
from typing import Any, Callable, Dict, List, Optional, Protocol, Tuple

from launcher.execution.results import ProcResult
from launcher.planning.job.kinds import Role
from launcher.planning.job.spec import ProcPlan

#: A rank's scheduler figures as a sampler gives them: ``(time, cpu_s, delay_s, send_queued,
#: busiest_link_s)`` (see :meth:`ProcessHandle.sched_figures`).
RankFigures = Tuple[float, float, float, float, float]


def figures(got: Any) -> Optional[RankFigures]:
    """A sampler's list as :data:`RankFigures`: 3 to 5 numbers (an older sampler's have no send
    queue, 0, nor busiest link, -1.0: unknown); None if it is not such a list."""
    if not isinstance(got, (list, tuple)) or not 3 <= len(got) <= 5:
        return None
    try:
        full = [float(x) for x in got] + [0.0, -1.0][len(got) - 3 :]
    except (TypeError, ValueError):
        return None
    return (full[0], full[1], full[2], full[3], full[4])


class WatchdogLink(Protocol):
    """What a started process needs of the job's watchdog (see :mod:`launcher.execution.process.watchdog`)."""

    token: str
    fd: int


class ProcessHandle(ABC):
    """A started process (see the module doc for its states).

    Attributes:
        plan: the planned process it runs (mpirun: a process standing for all of them).
        host: where it runs.
        log_path: its log on this machine.
        started: epoch seconds of the start.
        pid: its pid on its host, or None (none, or not known yet).
        pgid: its process group on this machine, or None (remote, or none).
        exit_time: epoch seconds of the exit as the backend saw it, or None.
        exit_order: the kernel's order of exits among this mslaunch's processes, or None.
        reason: why it failed when the exit code does not say (lost host, cannot start).
        host_lost: set by the backend, with how, when the process ended because its host was lost
            (ssh: the session or the host's agent gone; mpirun: the host's daemon session failed
            first; slurm: Slurm holds the node down or not responding; mpirun and slurm fill it
            in their ``outcomes``): the supervisor's host faults leave such a
            host out at once (:mod:`launcher.execution.supervision.hostfaults`). A typed event:
            nothing reads it from ``reason``.
    """

    plan: ProcPlan
    host: str
    log_path: str
    started: float
    pid: Optional[int] = None
    pgid: Optional[int] = None
    exit_time: Optional[float] = None
    exit_order: Optional[int] = None
    reason: Optional[str] = None
    host_lost: Optional[str] = None
    #: monotonic time since which its process is seen stopped by a signal (see :meth:`stopped_for`)
    stopped_since: Optional[float] = None
    #: its process tree's :data:`RankFigures` as last reported (see :meth:`sched_figures`)
    sched_seen: Optional[RankFigures] = None
    _sched_counter: Any = None  # proctree.SchedCounter of a rank on this machine

    @abstractmethod
    def wait(self) -> int:
        """Block until the process exited; its returncode (negative: signal; 255: lost)."""

    @abstractmethod
    def poll(self) -> Optional[int]:
        """Its returncode once it exited, else None (never blocks)."""

    @abstractmethod
    def terminate(self) -> None:
        """SIGTERM to its process group (no-op once it exited)."""

    @abstractmethod
    def kill(self) -> None:
        """SIGKILL to its process group and every descendant (also after the leader exited)."""

    def has_exited(self) -> bool:
        """True once it is known to have ended by itself, even before ``wait()`` returned.

        Teardown leaves such a process alone, so its own exit counts (it may be the earliest
        failure).  Default: False (not known), which tears it down like a running one.
        """
        return False

    def stopped_for(self, now: float) -> Optional[float]:
        """Seconds this rank's own process has been stopped by a signal (state ``T``: SIGSTOP, a
        terminal's ^Z) as of ``now`` (monotonic), or None while it is not, or where that cannot be
        known. A stopped process neither exits nor prints: the hang watch ends the attempt after
        ``--stopped-timeout`` instead of waiting for a collective's timeout.

        Default: a rank on this machine, looked at in ``/proc`` on each call; None for a handle
        without a rank (mpirun, a Slurm step: they stand for many) or on another host. Backends
        that see their hosts' processes override it (ssh: the host agent's heartbeats).
        """
        from launcher.execution.process.proctree import is_stopped
        from launcher.planning.inventory.model import is_local

        if self.pid is None or self.plan.rank is None or not is_local(self.host) or self.has_exited():
            return None
        return self.seen_stopped(is_stopped(self.pid), now)

    def seen_stopped(self, stopped: bool, now: float) -> Optional[float]:
        """Record one look at the process (stopped or not) at ``now``; :meth:`stopped_for`'s answer."""
        if not stopped:
            self.stopped_since = None
            return None
        if self.stopped_since is None:
            self.stopped_since = now
        return now - self.stopped_since

    def sched_figures(self) -> Optional[RankFigures]:
        """``(time, cpu_s, delay_s, send_queued, busiest_link_s)``: this rank's process tree's cumulative seconds on
        a CPU and runnable but waiting for one (CFS throttling included), at ``time`` (seconds of a
        monotonic clock of the sampler's own; only differences count), and the bytes waiting in its
        TCP send queues now, and the cumulative seconds its busiest TCP connection had data in flight
        (-1.0: unknown); None where not known. The straggler watch compares ranks by them
        (:mod:`launcher.execution.supervision.stragglerwatch`).

        Default: a rank on this machine, read from ``/proc`` on each call
        (:class:`~launcher.execution.process.proctree.SchedCounter`); None for a handle without a
        rank or on another host. Backends that see their hosts' processes override it (ssh: the
        host agent's heartbeats).
        """
        from launcher.execution.process.proctree import SchedCounter
        from launcher.planning.inventory.model import is_local

        if self.pid is None or self.plan.rank is None or not is_local(self.host) or self.has_exited():
            return None
        if self._sched_counter is None:
            self._sched_counter = SchedCounter()
        got = self._sched_counter.sample(self.pid)
        return None if got is None else figures(got)

    def rank_figures(self) -> Dict[int, Tuple[str, RankFigures]]:
        """``{rank: (host, figures)}`` of the workers this handle stands for, figures as
        :meth:`sched_figures` gives them; what the straggler watch judges.

        Default: this handle's own rank (a worker) from :meth:`sched_figures`.  A handle that
        stands for many ranks (mpirun's, an srun step's) gives theirs, as sampled on their hosts
        (:mod:`launcher.execution.process.rankfigures`).
        """
        if self.plan.rank is None or self.plan.role != Role.WORKER:
            return {}
        figs = self.sched_figures()
        return {} if figs is None else {self.plan.rank: (self.host, figs)}

    def notify_exit(self, callback: Callable[[int], None]) -> bool:
        """Ask for ``callback(returncode)`` once the process exited (what ``wait()`` returns),
        called from a thread of the backend, so the supervisor needs no waiter thread per
        process.  Returns False when the backend does not offer it (default): the supervisor
        then blocks a thread in ``wait()``.  A backend that returns True calls ``callback``
        exactly once (at once if the process already exited).
        """
        return False

    def dump_stacks(self, folder: str) -> Dict[Optional[int], List[str]]:
        """Dump the stacks of this process (and of what it stands for) into ``folder`` where it
        runs; rank -> files, the rank's own process first (the hang watch calls it for every
        running rank at once, see :mod:`launcher.execution.supervision.hangwatch`).

        Default: a process on this machine is dumped from its process tree (py-spy, else /proc;
        a handle without a rank, such as mpirun's, stands for its descendants, named by their
        ``RANK_ID``); a process elsewhere, by a backend that has no way to reach it, gives {}.
        Backends whose processes run on other hosts override it (ssh: on the host, through its
        agent's connection; slurm: an ``srun`` step on the node; mpirun: the ranks on other hosts
        over ssh, found there by the job's marker)."""
        from launcher.execution.process import stackdump
        from launcher.planning.inventory.model import is_local

        if self.pid is None or not is_local(self.host):
            return {}
        name = f"rank{self.plan.rank}" if self.plan.rank is not None else self.plan.name.replace(" ", "")
        out: Dict[Optional[int], List[str]] = {}
        for path in stackdump.dump_many(folder, stackdump.expand([(name, self.pid)], by_env=self.plan.rank is None)):
            out.setdefault(stackdump.rank_of_name(os.path.basename(path).rpartition(".pid")[0]), []).append(path)
        return out

    def outcomes(
        self, returncode: Optional[int], ended: Optional[float], torn_down: bool, note: Optional[str] = None
    ) -> List[ProcResult]:
        """The results of the planned processes this handle stands for (default: itself).

        Args:
            returncode: what ``wait()`` returned, or None if it never returned.
            ended: epoch seconds when the supervisor learned of the exit, or None.
            torn_down: the supervisor ended it (teardown).
            note: the supervisor's reason when the handle has none (e.g. "ended after every
                worker finished").
        """
        return [
            ProcResult(
                name=self.plan.name,
                rank=self.plan.rank,
                host=self.host,
                returncode=returncode,
                started=self.started,
                ended=self.exit_time or ended,
                log=self.log_path,
                torn_down=torn_down,
                reason=self.reason or note,
                pid=self.pid,
                exit_order=self.exit_order,
                host_lost=self.host_lost,
            )
        ]


class ReportedProcess(ProcessHandle):
    """A handle whose exit is reported to it (by a reader thread or a test): :meth:`exited`.

    Subclasses implement terminate/kill; the exit's state exists before their ``__init__`` runs.
    """

    _done: threading.Event
    _rc: Optional[int]

    def __new__(cls, *args: Any, **kwargs: Any) -> "ReportedProcess":
        obj = super().__new__(cls)
        obj._done = threading.Event()
        obj._rc = None
        return obj

    def exited(self, rc: int, exit_time: Optional[float] = None) -> None:
        """Record the exit (the first report wins) and wake ``wait()``."""
        if self._done.is_set():
            return
        self._rc, self.exit_time = rc, exit_time
        self._done.set()

    def wait(self) -> int:
        self._done.wait()
        assert self._rc is not None
        return self._rc

    def poll(self) -> Optional[int]:
        return self._rc if self._done.is_set() else None
