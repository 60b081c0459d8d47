"""The console of ``mslaunch run``: the job's header, its ranks' output while it runs, and one
line per event of the job (:mod:`launcher.planning.job.events`), on stderr."""

from __future__ import annotations

import os
import sys
import threading
from typing import TYPE_CHECKING, Any, Optional, Tuple

from launcher.planning.job import layout
from launcher.planning.job.events import (
    CheckpointFailed,
    ClusterStop,
    Event,
    Failure,
    HostExcluded,
    HostRejoined,
    Hung,
    Interrupted,
    PlannedRestart,
    Resized,
    Restart,
    StopRestarts,
    Straggler,
    Teardown,
    TimedOut,
)
from launcher.planning.job.kinds import describe_returncode
from launcher.planning.job.spec import Plan

if TYPE_CHECKING:
    from rich.console import Console as RichConsole

__all__ = ["Console", "event_line"]


def event_line(event: Event, attempt_dir: str = "") -> Optional[str]:
    """The console's line for ``event`` (without ``mslaunch: ``), or None for an event it does not show.

    ``attempt_dir``: the log folder of the attempt a :class:`Restart` starts.
    """
    if isinstance(event, Failure):
        return f"{event.name} on {event.host} failed ({describe_returncode(event.returncode)}); tearing down the job"
    if isinstance(event, Teardown):
        return f"stopping {len(event.names)} process(es)"
    if isinstance(event, TimedOut):
        return f"the job ran past --timeout {event.timeout:g} s; tearing down"
    if isinstance(event, Interrupted):
        return f"received signal {event.signal}; tearing down"
    if isinstance(event, (Hung, ClusterStop)):
        return f"{event.message}; tearing down"
    if isinstance(event, StopRestarts):
        return event.message
    if isinstance(event, CheckpointFailed):
        return f"rank {event.rank}: a checkpoint was not written ({event.why}); the job trains on"
    if isinstance(event, Straggler):
        if event.cleared:
            return f"rank {event.rank} on {event.host} is no longer a straggler: {event.evidence}"
        return f"straggler: {event.evidence}"
    if isinstance(event, HostExcluded):  # the restart after it runs on the spare hosts
        reason = event.exclusion.reason
        why = reason if reason.startswith("host lost") else f"after {reason}"
        return f"restart: leaving out {event.exclusion.host} {why}" + (f"; {event.moves}" if event.moves else "")
    if isinstance(event, PlannedRestart):
        return f"planned restart: {event.reason}; the ranks save at their next step's end, then restart"
    if isinstance(event, HostRejoined):
        return f"restart: {event.host} answers again; trying it again (it was left out: {event.left_out})"
    if isinstance(event, Resized):
        hosts = f"{event.hosts} host{'s' * (event.hosts != 1)}"
        verb = "goes on with" if event.world_size < event.previous else "grows back to"
        return (
            f"elastic: attempt {event.attempt} {verb} {event.world_size} of {event.planned} ranks on {hosts} "
            f"({event.why}); every process finds MSLAUNCH_WORLD_SIZE={event.world_size} "
            f"MSLAUNCH_PLANNED_WORLD_SIZE={event.planned}"
        )
    if isinstance(event, Restart):
        line = (
            f"restarting the job: attempt {event.attempt} (MSLAUNCH_ATTEMPT={event.env_attempt}); logs in {attempt_dir}"
        )
        judged = event.cause.cause if event.cause is not None else None  # the failed attempt's judged cause
        if judged is not None:
            line += f"; attempt {event.attempt - 1} failed with {judged.kind}: {judged.evidence}"
        if event.ckpt_interval is not None:
            line += f"; {event.ckpt_interval.describe()}"
        return line
    return None


class Console:
    """Rank output on the console while the job runs (a follower over the log files)."""

    def __init__(
        self,
        plan: Plan,
        tee: str,
        ranks: Optional[Tuple[int, ...]] = None,
        tail_all: bool = False,
        live: bool = False,
        start_note: Optional[str] = None,
    ) -> None:
        """``ranks``/``tail_all``: msrun's ``--tail_worker_log`` (every line of those ranks, or of
        every rank when ``tail_all`` and ``ranks`` is None), replacing ``--tee``.  ``live``: the
        live per-rank view (a terminal and no ``--tee``), with every rank's error lines above it."""
        self.plan = plan
        self.tee = tee
        self.ranks = ranks
        self.tail_all = tail_all
        self.live = live
        self.start_note = start_note
        self.colour = sys.stdout.isatty()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._attempt_dir = plan.job_dir
        self._lock = threading.Lock()
        self._rich: Optional["RichConsole"] = None  # the live view's console, while it runs
        self._live_thread: Optional[threading.Thread] = None

    def start(self) -> None:
        sys.stderr.write(
            f"mslaunch: job {self.plan.job_id}: {self.plan.world_size} ranks, method {self.plan.method}, "
            f"launcher {self.plan.launcher}; logs in {self.plan.job_dir}\n"
        )
        for note in self.plan.cpu_notes:
            kind = "warning" if note in self.plan.cpu_warnings else "cpu"
            sys.stderr.write(f"mslaunch: {kind}: {note}\n")
        if self.start_note:
            sys.stderr.write(f"mslaunch: start: {self.start_note}\n")
        if self.tee == "none":
            return
        from launcher.logs.follow import ERROR_RE, Follower, LogSource, job_log_sources, prefix

        if self.live:
            self._start_live()
        only_rank0 = self.tee in ("rank0", "errors")
        tailing = self.tail_all or self.ranks is not None

        def sources() -> Any:
            if not tailing and all(
                layout.parse_worker_log(os.path.basename(p.log)) is not None for p in self.plan.ranks
            ):
                return job_log_sources(self._attempt_dir, scheduler=self.tee == "all")
            out = []
            for p in self.plan.ranks:  # the plan's names (--worker_log_name)
                if tailing and self.ranks is not None and p.rank not in self.ranks:
                    continue
                path = os.path.join(self._attempt_dir, os.path.relpath(p.log, self.plan.job_dir))
                if os.path.exists(path):
                    out.append(LogSource(p.name, path, p.rank if p.rank is not None else p.local_rank))
            return out

        def emit(src: Any, line: str) -> None:
            if self.live:  # the live view shows progress; error lines of every rank are printed above it
                if ERROR_RE.search(line) and self._rich is not None:  # set by _start_live
                    from rich.text import Text

                    self._rich.print(Text.from_ansi(prefix(src, self.colour) + line), soft_wrap=True)
                return
            if not tailing and only_rank0 and src.rank != 0:
                if self.tee == "rank0" or not ERROR_RE.search(line):
                    return
            with self._lock:
                sys.stdout.write(prefix(src, self.colour) + line + "\n")
                sys.stdout.flush()

        follower = Follower(sources, emit, from_start=True, interval=0.2)
        self._thread = threading.Thread(target=follower.run, args=(self._stop,), name="tee", daemon=True)
        self._thread.start()

    def note(self, message: str) -> None:
        """A one-line message from the backend (e.g. the zygote's fallback), on stderr."""
        with self._lock:
            sys.stderr.write(f"mslaunch: {message}\n")
            sys.stderr.flush()

    def event(self, event: Event) -> None:
        """One line on stderr for the events the console shows (:func:`event_line`); above the live
        view when it runs."""
        if isinstance(event, Restart):
            from launcher.jobs.jobdir import attempt_dir

            self._attempt_dir = attempt_dir(self.plan.job_dir, event.attempt)
        msg = event_line(event, self._attempt_dir)
        if msg and self.live and self._rich is not None and not self._stop.is_set():
            self._rich.print(f"mslaunch: {msg}", style="bold", highlight=False, markup=False, soft_wrap=True)
        elif msg:
            with self._lock:
                sys.stderr.write(f"mslaunch: {msg}\n")
                sys.stderr.flush()

    def _start_live(self) -> None:
        """The live per-rank table (``mslaunch top``) under the console's other output."""
        from rich.console import Console as RichConsole

        from launcher.cli.top import JobWatch, live_loop

        rich = self._rich = RichConsole()

        def loop() -> None:
            try:
                live_loop(JobWatch(self.plan.job_dir), self._stop, 1.0, console=rich, until_end=False)
            except Exception as exc:  # the view is a convenience: never fail the job for it
                sys.stderr.write(f"mslaunch: live view stopped: {exc}\n")

        self._live_thread = threading.Thread(target=loop, name="live", daemon=True)
        self._live_thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._live_thread is not None:
            self._live_thread.join(timeout=5)
