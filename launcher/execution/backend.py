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

Registry: built-in backends are listed as ``module:Class`` in :mod:`launcher.execution.backends`
and imported on first use (so the CLI does not pay for paramiko unless the ssh backend runs);
importing a backend module registers nothing.  Others are registered with :func:`register_backend`.  ``--launcher``
choices and ``doctor`` read
:func:`backend_names` / :func:`get_backend`.

Adding a backend: one module (or package) with a :class:`Backend` and a
:class:`~launcher.execution.process.handle.ProcessHandle` subclass (its ``doctor_check`` a class
attribute), and its line in :data:`launcher.execution.backends.BUILTIN`.  If it runs an argv of its own (mpirun,
srun), a pure builder under ``launcher/planning/`` makes it and :meth:`Backend.describe` shows
it in ``plan.json`` and ``--dry-run``.  ``tests/execution/toy_backend.py`` is a complete example.
"""

from __future__ import annotations

import importlib
import os
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Dict, Mapping, Optional, Set, Tuple, Type

from launcher.errors import LaunchError
from launcher.execution.process.handle import ProcessHandle, WatchdogLink
from launcher.planning.job.spec import Plan, ProcPlan


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


class Backend(ABC):
    """Starts the processes of one attempt (see the module doc for the life cycle).

    Class attributes:
        local_only: every process runs on this machine (planning allows only local hosts).
        prepares_rank_dirs: mslaunch creates the ranktable method's ``device<rank>/`` dirs and
            env dumps before start (False when the backend's own wrapper does it on each host).
        doctor_check: the tool ``mslaunch doctor`` looks for on this machine (None: none).
    """

    local_only: ClassVar[bool] = False
    prepares_rank_dirs: ClassVar[bool] = True
    doctor_check: ClassVar[Optional["ToolCheck"]] = None

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

    For backends outside :data:`launcher.execution.backends.BUILTIN` (a plug-in, a test's toy
    backend); registering a name again replaces the entry.  ``doctor_check`` defaults to the
    class's own :attr:`Backend.doctor_check`.
    """
    _REGISTRY[name] = BackendEntry(name, factory, doctor_check if doctor_check is not None else factory.doctor_check)


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
    entries = [get_backend(name) for name in backend_names()]
    return tuple(e.doctor_check for e in entries if e.doctor_check is not None)


def get_backend(name: str) -> BackendEntry:
    """The backend called ``name``: a registered one, else a built-in one (its module imported
    on first use).

    Raises:
        LaunchError: no backend has that name.
    """
    entry = _REGISTRY.get(name)
    if entry is not None:
        return entry
    target = _builtin().get(name)
    if target is None:
        raise LaunchError(f"unknown launcher {name!r}; use one of {', '.join(backend_names())}")
    module, _, cls_name = target.partition(":")
    factory = getattr(importlib.import_module(module), cls_name)
    return BackendEntry(name, factory, factory.doctor_check)


def plan_json(plan: Plan) -> Dict[str, Any]:
    """``plan.json`` / ``plan --json``: the plan with its backend's entries (mpirun: its argv).

    Raises:
        LaunchError: no backend has the plan's name.
    """
    return plan.to_json(get_backend(plan.launcher).factory.describe(plan))
