"""The backend interface: how one attempt's processes are started, watched and ended.

A *backend* (``--launcher``) starts the processes of one attempt of a :class:`Plan` and hands
back one :class:`ProcessHandle` per started process; the supervisor
(:mod:`launcher.execution.supervision.supervisor`) drives every backend through this interface only.

State machine of one attempt (one backend instance per attempt; a restart makes a new one)::

    created     Backend.create(ctx): may connect to hosts and copy files; raises LaunchError
                when it cannot (nothing started; on a restart that attempt records the failure)
    started     start() once per StartRequest of requests(), in order; each returns at once
                with a ProcessHandle whose process is running (or already failing)
    exited      a handle's wait() returned its returncode: the process ended by itself
    terminated  teardown: terminate() (SIGTERM to the group), the grace, then kill() (SIGKILL
                to the group and every descendant) on every handle, exited ones included
    closed      close(): always, after teardown (connections, helper processes released)

Handles: ``wait()`` blocks until the process exited (subprocess convention: negative = killed
by that signal; 255 with a ``reason`` when a connection was lost); ``poll()`` never blocks;
``terminate()``/``kill()`` are safe in every state (a group may outlive its leader);
``pid``/``pgid`` are None where a backend has none (yet); ``has_exited()`` tells an exit that
``wait()`` has not reported yet (teardown then leaves the process alone: its own exit counts).

One process may stand for many (mpirun runs every rank): its backend returns one request,
and the handle's :meth:`ProcessHandle.outcomes` turns its exit into one result per planned
process.

Registry: each backend module calls :func:`register_backend` with its name; built-in modules
are listed in :mod:`launcher.execution.backends` and imported on first use (so the CLI does not
pay for paramiko unless the ssh backend runs).  ``--launcher`` choices and ``doctor`` read
:func:`backend_names` / :func:`get_backend`.

Adding a backend: one module (or package) with a :class:`Backend` and a :class:`ProcessHandle`
subclass and a ``register_backend(name, cls, doctor_check)`` line; a built-in one also gets a
line in :data:`launcher.execution.backends.BUILTIN`.  If it runs an argv of its own (mpirun,
srun), a pure builder under ``launcher/planning/`` makes it and :meth:`Backend.describe` shows
it in ``plan.json`` and ``--dry-run``.  ``tests/execution/toy_backend.py`` is a complete example.
"""
from __future__ import annotations

import importlib
import os
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Dict, List, Mapping, Optional, Protocol, Set, Tuple, Type

from launcher.errors import LaunchError
from launcher.execution.results import ProcResult
from launcher.planning.jobspec import Plan, ProcPlan


class WatchdogLink(Protocol):
    """What a started process needs of the job's watchdog (see :mod:`launcher.execution.local.watchdog`)."""

    token: str
    fd: int


@dataclass(frozen=True)
class BackendContext:
    """What a backend gets to set up one attempt.

    Attributes:
        plan: the job's plan.
        attempt: 0 for the first run, k for the k-th restart.
        attempt_dir: the attempt's log folder (the job dir, then ``attempt_<k>/``).
        watchdog: the job's watchdog, or None (local processes register with it).
        settings: backend name -> that backend's settings object, built once by the CLI
            (e.g. the ssh connection settings, the local backend's zygote switch).
    """

    plan: Plan
    attempt: int = 0
    attempt_dir: str = ""
    watchdog: Optional[WatchdogLink] = None
    settings: Mapping[str, Any] = field(default_factory=dict)

    def settings_for(self, name: str, default: Any = None) -> Any:
        """The settings the CLI gave backend ``name`` (``default`` when none)."""
        return self.settings.get(name, default)


@dataclass(frozen=True)
class StartRequest:
    """One process for :meth:`Backend.start`: what to run, its log and working directory."""

    proc: ProcPlan
    log_path: str
    cwd: str


def attempt_path(path: str, job_dir: str, attempt_dir: str) -> str:
    """Move a planned path under the job dir to the same name under ``attempt_dir``."""
    if attempt_dir == job_dir:
        return path
    rel = os.path.relpath(path, job_dir)
    return os.path.join(attempt_dir, rel)


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
        from launcher.execution.probes import stackdump
        from launcher.planning.hosts import is_local

        if self.pid is None or not is_local(self.host):
            return {}
        name = f"rank{self.plan.rank}" if self.plan.rank is not None else self.plan.name.replace(" ", "")
        out: Dict[Optional[int], List[str]] = {}
        for path in stackdump.dump_many(folder, stackdump.expand([(name, self.pid)], by_env=self.plan.rank is None)):
            out.setdefault(stackdump.rank_of_name(os.path.basename(path).rpartition(".pid")[0]), []).append(path)
        return out

    def outcomes(self, returncode: Optional[int], ended: Optional[float], torn_down: bool,
                 note: Optional[str] = None) -> List[ProcResult]:
        """The results of the planned processes this handle stands for (default: itself).

        Args:
            returncode: what ``wait()`` returned, or None if it never returned.
            ended: epoch seconds when the supervisor learned of the exit, or None.
            torn_down: the supervisor ended it (teardown).
            note: the supervisor's reason when the handle has none (e.g. "ended after every
                worker finished").
        """
        return [ProcResult(
            name=self.plan.name, rank=self.plan.rank, host=self.host, returncode=returncode, started=self.started,
            ended=self.exit_time or ended, log=self.log_path, torn_down=torn_down,
            reason=self.reason or note, pid=self.pid, exit_order=self.exit_order, host_lost=self.host_lost,
        )]


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


class Backend(ABC):
    """Starts the processes of one attempt (see the module doc for the life cycle).

    Class attributes:
        local_only: every process runs on this machine (planning allows only local hosts).
        prepares_rank_dirs: mslaunch creates the ranktable method's ``device<rank>/`` dirs and
            env dumps before start (False when the backend's own wrapper does it on each host).
    """

    local_only: ClassVar[bool] = False
    prepares_rank_dirs: ClassVar[bool] = True

    @classmethod
    @abstractmethod
    def create(cls, ctx: BackendContext) -> "Backend":
        """Set up one attempt (connect, copy files); the instance that starts its processes.

        Raises:
            LaunchError: the backend cannot be set up (a host unreachable, a tool missing).
        """

    @classmethod
    def preflight(cls, plan: Plan) -> None:
        """Checks before anything is written or started (default: none).

        Raises:
            LaunchError: the job cannot start (e.g. the scheduler's port is busy here).
        """

    @classmethod
    def describe(cls, plan: Plan) -> Dict[str, Any]:
        """Backend-specific entries of ``plan.json`` / ``plan --json`` / ``--dry-run`` (pure).

        Each value that is a list of strings is shown as a command line by ``--dry-run``
        (e.g. ``{"mpirun": [...argv]}``).  Default: nothing.
        """
        return {}

    def requests(self, plan: Plan, attempt_dir: str) -> Tuple[StartRequest, ...]:
        """What to start for this attempt, in order (default: every planned process, the
        scheduler first, with its log and cwd moved under ``attempt_dir``)."""
        out = []
        for proc in plan.processes:
            log = attempt_path(proc.log, plan.job_dir, attempt_dir)
            cwd = attempt_path(proc.cwd, plan.job_dir, attempt_dir) if proc.cwd.startswith(plan.job_dir) else proc.cwd
            out.append(StartRequest(proc, log, cwd))
        return tuple(out)

    @abstractmethod
    def start(self, proc: ProcPlan, log_path: str, cwd: str) -> ProcessHandle:
        """Start one process; returns at once with its handle.

        Raises:
            LaunchError: it could not be started (the message names the process and why).
        """

    def close(self) -> None:
        """Release what :meth:`create` set up (connections, helper processes); default: nothing.
        A backend may keep a helper for the job's next attempt instead (see :meth:`end_job`)."""

    def keeps(self) -> Set[int]:
        """Pids of this machine's helper processes the backend keeps for the next attempt, which
        the teardown's orphan reaper must spare (e.g. the local launcher's warm zygote); default none."""
        return set()

    @classmethod
    def end_job(cls, settings: Mapping[str, Any]) -> None:
        """The job's last attempt is over: end what its attempts kept for a restart (``settings``:
        the CLI's backend settings, as in :class:`BackendContext`); default: nothing."""

    def outside_stop(self) -> Optional[Tuple[str, str]]:
        """Whether the cluster's own scheduler is ending this attempt (a preemption, its time
        limit, a cancel), asked after a stop signal or a failure, before :meth:`close`:
        ``(status, message)`` for the summary (``preempted``, ``timeout`` or ``stopped``), or
        None (the default: the failure or the signal is judged as usual)."""
        return None


# ---------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class ToolCheck:
    """A ``doctor`` check a backend adds: ``exe`` is installed on every host at this machine's version.

    Attributes:
        name: the column (and probe result key), e.g. ``mpirun``.
        exe: the executable, run as ``exe --version`` on every host.
        install_hint: what to do when it is missing.
    """

    name: str
    exe: str
    install_hint: str


@dataclass(frozen=True)
class BackendEntry:
    """A registered backend: its name, its class and its ``doctor`` check."""

    name: str
    factory: Type[Backend]
    doctor_check: Optional[ToolCheck] = None

    def create(self, ctx: BackendContext) -> Backend:
        return self.factory.create(ctx)


_REGISTRY: Dict[str, BackendEntry] = {}


def register_backend(name: str, factory: Type[Backend], doctor_check: Optional[ToolCheck] = None) -> None:
    """Make ``factory`` (a :class:`Backend` subclass) the backend called ``name`` (``--launcher name``).

    Registering a name again replaces the entry (a test may register a toy backend).
    """
    _REGISTRY[name] = BackendEntry(name, factory, doctor_check)


def unregister_backend(name: str) -> None:
    """Forget backend ``name`` (tests that registered one)."""
    _REGISTRY.pop(name, None)


def _builtin() -> Dict[str, str]:
    from launcher.execution.backends import BUILTIN

    return BUILTIN


def backend_names() -> Tuple[str, ...]:
    """Every backend name: the built-in ones (not imported by this call), then registered ones."""
    names = list(_builtin())
    names += [n for n in _REGISTRY if n not in names]
    return tuple(names)


def doctor_checks() -> Tuple[ToolCheck, ...]:
    """Every backend's ``doctor`` tool check (imports the built-in backend modules)."""
    for name in backend_names():
        get_backend(name)
    return tuple(e.doctor_check for e in _REGISTRY.values() if e.doctor_check is not None)


def get_backend(name: str) -> BackendEntry:
    """The backend called ``name``, importing its built-in module on first use.

    Raises:
        LaunchError: no backend has that name.
    """
    if name not in _REGISTRY:
        module = _builtin().get(name)
        if module is not None:
            importlib.import_module(module)
    entry = _REGISTRY.get(name)
    if entry is None:
        raise LaunchError(f"unknown launcher {name!r}; use one of {', '.join(backend_names())}")
    return entry


def plan_json(plan: Plan) -> Dict[str, Any]:
    """``plan.json`` / ``plan --json``: the plan with its backend's entries (mpirun: its argv).

    Raises:
        LaunchError: no backend has the plan's name.
    """
    return plan.to_json(get_backend(plan.launcher).factory.describe(plan))
