"""The supervisor: start a plan's processes, watch them, fail fast, tear down, restart.

State machine of one attempt::

    starting --(scheduler port accepts, workers started)--> running
    running  --(a process fails: non-zero exit, signal, lost connection)--> tearing_down
    running  --(every worker exited 0)--> finishing (scheduler gets ``sched_grace`` s) --> done
    running  --(--timeout | SIGINT/SIGTERM/SIGHUP to mslaunch)--> tearing_down
    tearing_down: SIGTERM to every process group, ``grace`` s, SIGKILL to whole trees --> done

Waiting never busy-loops: one thread per process blocks in ``wait()`` and posts to a queue;
the main thread blocks on that queue.  Signals to mslaunch become :class:`Interrupted`
exceptions, so ``finally`` blocks always tear down.  A watchdog process (see
:mod:`launcher.execution.watchdog`) kills every process of the job if mslaunch itself is killed.
"""
from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Protocol, Set, Tuple

from launcher.errors import LaunchError
from launcher.execution import stopsignals
from launcher.execution.stopsignals import Interrupted
from launcher.execution.results import (
    FAILED, STOPPED, SUCCEEDED, TIMEOUT, TIMEOUT_EXIT, AttemptResult, JobResult, ProcResult, RootCause,
    earliest_failure, exit_code_of, lost_nodes_note, tail_lines,
)
from launcher.planning import layout
from launcher.planning.kinds import describe_returncode
from launcher.planning.plan import Plan, ProcPlan


class Handle(Protocol):
    """A started process (local, remote, or mpirun standing for all ranks)."""

    plan: ProcPlan
    host: str
    log_path: str
    started: float

    def wait(self) -> int: ...
    def poll(self) -> Optional[int]: ...
    def terminate(self) -> None: ...
    def kill(self) -> None: ...


class Launcher(Protocol):
    """Starts processes of a plan; one per job attempt."""

    def start(self, proc: ProcPlan, log_path: str, cwd: str) -> Handle: ...
    def close(self) -> None: ...


@dataclass(frozen=True)
class SuperviseOptions:
    """Supervision knobs (CLI: --grace, --timeout, --start-timeout, --max-restarts).

    Attributes:
        grace: seconds between SIGTERM and SIGKILL at teardown.
        timeout: bound on the whole job in seconds, or None.
        start_timeout: seconds for the scheduler's port to accept connections.
        max_restarts: restarts of the whole group after a failure.
        sched_grace: seconds the scheduler gets to exit by itself once every worker exited 0.
        scheduler_first: start the workers only once the scheduler's port accepts; False starts
            them right after the scheduler process (they retry registering) and checks the port
            after, with the same --start-timeout.
    """

    grace: float = 5.0
    timeout: Optional[float] = None
    start_timeout: float = 60.0
    max_restarts: int = 0
    sched_grace: float = 0.25
    scheduler_first: bool = True


Event = Tuple[str, Dict[str, Any]]


class _Attempt:
    """Bookkeeping of one attempt: handles, exits, who was torn down."""

    def __init__(self) -> None:
        self.handles: List[Handle] = []
        self.exits: Dict[int, Tuple[int, float]] = {}
        self.torn: Dict[int, bool] = {}
        self.notes: Dict[int, str] = {}
        self.events: "queue.Queue[Tuple[int, int, float]]" = queue.Queue()
        self.failures: List[ProcResult] = []
        self.start_failure: Optional[ProcResult] = None

    def add(self, handle: Handle) -> int:
        idx = len(self.handles)
        self.handles.append(handle)

        def waiter() -> None:
            try:
                rc = handle.wait()
            except Exception as exc:  # a launcher bug must not hang the job: count it as a failure
                rc = 255
                try:
                    handle.reason = f"lost: {exc}"  # type: ignore[misc]
                except AttributeError:
                    pass
            self.events.put((idx, rc, time.time()))

        threading.Thread(target=waiter, name=f"wait-{handle.plan.name}", daemon=True).start()
        return idx

    def running(self) -> List[int]:
        return [i for i in range(len(self.handles)) if i not in self.exits]

    def record(self, idx: int, rc: int, when: float) -> None:
        self.exits.setdefault(idx, (rc, when))

    def drain(self, timeout: float) -> Optional[Tuple[int, int, float]]:
        try:
            ev = self.events.get(timeout=timeout)
        except queue.Empty:
            return None
        self.record(*ev)
        return ev


def attempt_path(path: str, job_dir: str, attempt_dir: str) -> str:
    """Move a planned path under the job dir to the same name under ``attempt_dir``."""
    if attempt_dir == job_dir:
        return path
    rel = os.path.relpath(path, job_dir)
    return os.path.join(attempt_dir, rel)


class Supervisor:
    """Runs a :class:`Plan` to completion and returns a :class:`JobResult`.

    Args:
        plan: the plan.
        launcher_factory: makes the launcher for an attempt (local, ssh).
        options: supervision knobs.
        on_event: called with ``(kind, data)`` for console output: ``started``, ``failure``,
            ``teardown``, ``restart``, ``timeout``, ``interrupted``.
        prepare_attempt: called with the attempt dir before processes start (e.g. to create
            per-rank working dirs and env dumps).
        watchdog: the job's watchdog (local processes register with it themselves; reaped ones
            are forgotten after teardown), or None.
        attempt_dir: attempt number -> its log folder (default: job dir, then attempt_<k>/).
        reap_orphans: called after each teardown with the pids of the started processes; ends
            whatever else descends from mslaunch (see :func:`launcher.execution.local.reap_orphans`).
    """

    def __init__(
        self,
        plan: Plan,
        launcher_factory: Callable[[], Launcher],
        options: SuperviseOptions,
        on_event: Optional[Callable[[str, Dict[str, Any]], None]] = None,
        prepare_attempt: Optional[Callable[[int, str], None]] = None,
        watchdog: Optional["Watchdog"] = None,
        attempt_dir: Optional[Callable[[int], str]] = None,
        reap_orphans: Optional[Callable[[Set[int]], Any]] = None,
    ) -> None:
        self.plan = plan
        self.launcher_factory = launcher_factory
        self.options = options
        self.on_event = on_event or (lambda kind, data: None)
        self.prepare_attempt = prepare_attempt
        self.watchdog = watchdog
        self.attempt_dir = attempt_dir or (lambda k: layout.attempt_dir(plan.job_dir, k))
        self.current_attempt_dir = plan.job_dir
        self.reap_orphans = reap_orphans

    # ---------------------------------------------------------------- public

    def run(self) -> JobResult:
        """Run every attempt; a stop signal at any moment (even before this call, when recorded
        by :mod:`launcher.execution.stopsignals`) ends the job as ``stopped``.

        Raises:
            LaunchError: the launcher could not be set up (e.g. a host is unreachable) and no
                stop signal was received.
        """
        started = time.time()
        deadline = None if self.options.timeout is None else time.monotonic() + self.options.timeout
        attempt = 0
        history: List[AttemptResult] = []
        previous = _install_signal_handlers()
        try:
            while True:
                a_started = time.time()
                status, code, results, cause, message = self._run_attempt(attempt, deadline)
                history.append(AttemptResult(attempt, self.current_attempt_dir, status, code, a_started, time.time(),
                                             tuple(results), cause, message))
                if status == FAILED and attempt < self.options.max_restarts and stopsignals.first() is None:
                    attempt += 1
                    self.on_event("restart", {"attempt": attempt, "cause": cause})
                    continue
                return JobResult(
                    job_id=self.plan.job_id,
                    job_dir=self.plan.job_dir,
                    status=status,
                    exit_code=code,
                    started=started,
                    ended=time.time(),
                    attempts=attempt + 1,
                    processes=tuple(results),
                    root_cause=cause,
                    message=message,
                    history=tuple(history),
                )
        finally:
            _restore_signal_handlers(previous)

    # ---------------------------------------------------------------- one attempt

    def _run_attempt(self, attempt: int, deadline: Optional[float]) -> Tuple[str, int, List[ProcResult], Optional[RootCause], Optional[str]]:
        adir = self.attempt_dir(attempt)
        self.current_attempt_dir = adir
        state = _Attempt()
        launcher: Optional[Launcher] = None
        status, code, message = SUCCEEDED, 0, None
        try:
            try:
                # Armed: a stop signal raises Interrupted at once (also one received earlier).
                stopsignals.arm(True)
                _check_pending_signal()
                os.makedirs(adir, mode=0o700, exist_ok=True)
                if self.prepare_attempt is not None:
                    self.prepare_attempt(attempt, adir)
                try:
                    launcher = self.launcher_factory()
                except LaunchError:
                    _check_pending_signal()  # set-up cut short by a stop signal: stopped, not failed
                    raise
                self._start_all(state, launcher, adir, deadline)
                status, code, message = self._watch(state, deadline)
            except Interrupted as exc:
                status, code, message = STOPPED, 128 + exc.signum, f"mslaunch received {signal.Signals(exc.signum).name}"
                _quietly(lambda: self.on_event("interrupted", {"signal": exc.signum}))
            except _Timeout:
                status, code, message = TIMEOUT, TIMEOUT_EXIT, f"the job ran past --timeout {self.options.timeout:g} s"
                _quietly(lambda: self.on_event("timeout", {"timeout": self.options.timeout}))
            except _StartFailed as exc:
                status, code, message = FAILED, exc.code, exc.message
            finally:
                stopsignals.arm(False)  # from here on signals are only recorded: teardown runs to the end
                self._teardown(state, announce=status != SUCCEEDED)
        finally:
            if launcher is not None:
                launcher.close()
        results = self._results(state)
        cause = None
        failed = earliest_failure(results)
        if status == SUCCEEDED and failed is not None:
            status = FAILED
        if status == FAILED:
            if failed is not None:
                cause = RootCause(failed, tail_lines(failed.log, 20))
                code = failed.exit_code if failed.exit_code else 1
                if message is None:
                    message = f"{failed.name} on {failed.host} failed: {failed.describe()}"
            if self.plan.scheduler is not None:
                note = lost_nodes_note(tail_lines(attempt_path(self.plan.scheduler.log, self.plan.job_dir, adir), 200))
                if note is not None:
                    message = f"{message}; {note}" if message else note
            if code == 0:
                code = 1
        return status, code, results, cause, message

    def _start_all(self, state: _Attempt, launcher: Launcher, adir: str, deadline: Optional[float]) -> None:
        plan = self.plan
        start_group = getattr(launcher, "start_group", None)
        if start_group is not None:  # one process stands for the whole job (mpirun)
            with _signals_blocked():
                try:
                    handle = start_group(plan, adir)
                except LaunchError as exc:
                    raise _StartFailed(str(exc), 1) from None
                state.add(handle)
            self.on_event("started", {"name": handle.plan.name, "host": handle.host, "pid": getattr(handle, "pid", None), "log": handle.log_path})
            return
        sched_idx: Optional[int] = None
        for proc in plan.processes:
            self._check_deadline(deadline)
            _check_pending_signal()
            log = attempt_path(proc.log, plan.job_dir, adir)
            cwd = attempt_path(proc.cwd, plan.job_dir, adir) if proc.cwd.startswith(plan.job_dir) else proc.cwd
            # Signals wait until the process is registered: nothing started can be forgotten.
            with _signals_blocked():
                try:
                    handle = launcher.start(proc, log, cwd)
                except LaunchError as exc:
                    state.start_failure = ProcResult(proc.name, proc.rank, proc.host, None, time.time(), time.time(), log, reason=str(exc))
                    raise _StartFailed(str(exc), 1) from None
                idx = state.add(handle)
            self.on_event("started", {"name": proc.name, "host": proc.host, "pid": getattr(handle, "pid", None), "log": log})
            if proc.role == "scheduler" and plan.master_addr is not None and plan.master_port is not None:
                sched_idx = idx
                if self.options.scheduler_first:
                    self._wait_scheduler(state, idx, deadline)
        if not self.options.scheduler_first and sched_idx is not None:
            self._wait_scheduler(state, sched_idx, deadline)

    def _wait_scheduler(self, state: _Attempt, idx: int, deadline: Optional[float]) -> None:
        from launcher.execution.ports import wait_accepting

        handle = state.handles[idx]
        limit = self.options.start_timeout
        if deadline is not None:
            limit = min(limit, max(0.0, deadline - time.monotonic()))
        assert self.plan.master_addr is not None and self.plan.master_port is not None
        ok = wait_accepting(self.plan.master_addr, self.plan.master_port, limit, alive=lambda: handle.poll() is None)
        _check_pending_signal()
        if ok:
            return
        self._check_deadline(deadline)
        rc = handle.poll()
        if rc is not None:
            state.record(idx, rc, time.time())
            raise _StartFailed(f"the scheduler exited ({describe_returncode(rc)}) before its port {self.plan.master_addr}:{self.plan.master_port} accepted connections", exit_code_of(rc) or 1)
        state.start_failure = ProcResult(handle.plan.name, None, handle.host, None, handle.started, time.time(), handle.log_path,
                                         reason=f"port {self.plan.master_port} did not accept within --start-timeout {self.options.start_timeout:g} s")
        raise _StartFailed(f"the scheduler's port {self.plan.master_addr}:{self.plan.master_port} did not accept connections within --start-timeout {self.options.start_timeout:g} s", 1)

    def _watch(self, state: _Attempt, deadline: Optional[float]) -> Tuple[str, int, Optional[str]]:
        workers = {i for i, h in enumerate(state.handles) if h.plan.role != "scheduler"}
        sched = [i for i, h in enumerate(state.handles) if h.plan.role == "scheduler"]
        # Exits that happened while we were still starting processes.
        pending = set(workers)
        while True:
            for idx in list(pending):
                if idx in state.exits:
                    pending.discard(idx)
                    rc, _ = state.exits[idx]
                    if rc != 0:
                        self.on_event("failure", {"name": state.handles[idx].plan.name, "host": state.handles[idx].host, "returncode": rc})
                        return FAILED, exit_code_of(rc), None
            for idx in sched:
                if idx in state.exits and pending:
                    rc, _ = state.exits[idx]
                    if rc != 0:
                        self.on_event("failure", {"name": "scheduler", "host": state.handles[idx].host, "returncode": rc})
                        return FAILED, exit_code_of(rc), None
            if not pending:
                break
            wait = 1.0
            if deadline is not None:
                wait = min(wait, max(0.0, deadline - time.monotonic()))
            state.drain(wait)
            _check_pending_signal()
            self._check_deadline(deadline)
        # Every worker exited 0: the scheduler gets a short grace, then it is ended.
        end = time.monotonic() + self.options.sched_grace
        while any(i not in state.exits for i in sched) and time.monotonic() < end:
            state.drain(max(0.0, end - time.monotonic()))
        return SUCCEEDED, 0, None

    def _teardown(self, state: _Attempt, announce: bool = True) -> None:
        """SIGTERM every running group, wait ``grace``, SIGKILL whole trees; always kill groups.

        After a success only the scheduler can still be running; it is ended without notice.
        """
        # A process that already ended by itself (its waiter has not posted yet) is not torn
        # down: its own exit counts (it may be the earliest failure).
        running = [i for i in state.running() if not getattr(state.handles[i], "has_exited", lambda: False)()]
        if running and announce:
            _quietly(lambda: self.on_event("teardown", {"names": [state.handles[i].plan.name for i in running]}))
        for idx in running:
            state.torn[idx] = True
            if not announce:
                state.notes[idx] = "ended after every worker finished"
            try:
                state.handles[idx].terminate()
            except Exception:
                pass
        end = time.monotonic() + self.options.grace
        signals_seen = len(stopsignals.pending)
        while state.running() and time.monotonic() < end and len(stopsignals.pending) == signals_seen:
            state.drain(max(0.0, min(0.2, end - time.monotonic())))  # asked again to stop: skip the grace
        for idx in range(len(state.handles)):
            try:
                state.handles[idx].kill()  # whole group/tree, also leftovers of exited leaders
            except Exception:
                pass
        end = time.monotonic() + 5.0
        while state.running() and time.monotonic() < end:
            state.drain(0.2)
        if self.reap_orphans is not None:
            keep = {pid for pid in (getattr(h, "pid", None) for h in state.handles) if pid is not None}
            self.reap_orphans(keep)
        if self.watchdog is not None:
            for idx, h in enumerate(state.handles):
                pid = getattr(h, "pid", None)
                if pid is not None and idx in state.exits and getattr(h, "pgid", None) is not None:
                    self.watchdog.forget(pid)

    def _results(self, state: _Attempt) -> List[ProcResult]:
        out: List[ProcResult] = []
        by_name = {}
        for idx, h in enumerate(state.handles):
            rc, when = state.exits.get(idx, (None, None))
            outcomes = getattr(h, "outcomes", None)
            if outcomes is not None:  # one handle for many processes (mpirun)
                out.extend(outcomes(rc, when, state.torn.get(idx, False)))
                continue
            res = ProcResult(
                name=h.plan.name, rank=h.plan.rank, host=h.host, returncode=rc, started=h.started,
                ended=getattr(h, "exit_time", None) or when,
                log=h.log_path, torn_down=state.torn.get(idx, False),
                reason=getattr(h, "reason", None) or state.notes.get(idx), pid=getattr(h, "pid", None),
                exit_order=getattr(h, "exit_order", None),
            )
            by_name[h.plan.name] = res
            out.append(res)
        if state.start_failure is not None and state.start_failure.name not in by_name:
            out.append(state.start_failure)
        elif state.start_failure is not None:
            out = [state.start_failure if r.name == state.start_failure.name else r for r in out]
        return out

    def _check_deadline(self, deadline: Optional[float]) -> None:
        if deadline is not None and time.monotonic() >= deadline:
            raise _Timeout()


class _Timeout(Exception):
    pass


class _StartFailed(Exception):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


def _quietly(fn: Callable[[], Any]) -> None:
    """Call ``fn`` (console output); a failure there must not stop a teardown."""
    try:
        fn()
    except Exception:
        pass


# ------------------------------------------------------------------------ signals

_STOP_SIGNALS = stopsignals.STOP_SIGNALS


class _signals_blocked:
    """Defer SIGINT/SIGTERM/SIGHUP for the duration of the block (main thread only)."""

    def __enter__(self) -> None:
        self._old = None
        if threading.current_thread() is threading.main_thread():
            self._old = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)

    def __exit__(self, *exc: Any) -> None:
        if self._old is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, self._old)


def _check_pending_signal() -> None:
    stopsignals.check()


def _install_signal_handlers() -> Dict[int, Any]:
    """Record stop signals; keep those received before (``mslaunch run`` installs the same
    handler first thing, so a signal during start-up is pending here)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    if stopsignals.installed():
        return {}
    stopsignals.reset()
    return stopsignals.install()


def _restore_signal_handlers(previous: Dict[int, Any]) -> None:
    stopsignals.arm(False)
    stopsignals.restore(previous)


# ------------------------------------------------------------------------ watchdog


class Watchdog:
    """Client of :mod:`launcher.execution.watchdog` (one per ``mslaunch run``).

    Attributes:
        pid: the watchdog's pid.
        token: the job's token (``MSLAUNCH_JOB_TOKEN`` of every local process of the job).
        fd: the write end of the watchdog's pipe (close-on-exec; processes started by
            :func:`launcher.execution.local.start_local` register on it before exec).
    """

    def __init__(self) -> None:
        import secrets

        self.token = secrets.token_hex(16)
        read_end, self.fd = os.pipe()
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "launcher.execution.watchdog", self.token],
                stdin=read_end,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                close_fds=True,
            )
        finally:
            os.close(read_end)
        self.pid = self._proc.pid

    def _send(self, line: str) -> None:
        try:
            os.write(self.fd, line.encode() + b"\n")
        except OSError:
            pass

    def forget(self, pid: int) -> None:
        """Tell the watchdog that process ``pid`` was reaped (its pid may be reused)."""
        self._send(f"-{pid}")

    def close(self) -> None:
        """Tell the watchdog the job is torn down, and reap it."""
        self._send("exit")
        try:
            os.close(self.fd)
        except OSError:
            pass
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
