"""The zygote launcher: import MindSpore once, fork every local Python rank from that process.

Every MindSpore process of a job pays ``import mindspore`` (~1.5 s of CPU here, several seconds
when 8 ranks import at once on 2 cores).  The zygote is one helper process
(:mod:`launcher.execution.local.zygote_server`) that imports the preload modules once and then forks
each planned Python worker from that warm state; the children share the imported pages
copy-on-write.

The default for MindSpore CPU jobs of the local launcher (``--no-zygote`` opts out, ``--zygote``
asks for it on any job; the CLI decides, see ``docs/cpu-performance.md``).

* The zygote imports under the environment every worker shares (``os.environ`` plus the values
  common to the planned workers' env, e.g. ``GLOG_v``, ``OMP_NUM_THREADS``), without ``MS_ROLE``,
  so what a library reads once at import is what a plain worker would have read.
* The scheduler (``fork_scheduler``, the CLI's default with the zygote) is forked too, running
  MindSpore's ``init()`` alone (:mod:`launcher.workloads.scheduler`) instead of the user's whole
  script: one import of MindSpore for the whole job.  Otherwise it starts as an ordinary
  subprocess running the script while the zygote imports (both in parallel).
* Fork safety is checked, not assumed: the zygote answers ``unsafe`` when it is not a
  single-threaded process after the import (see the server's doc).  Then, and when the zygote
  ends or cannot start, the ranks start as plain processes (:func:`start_local`) and ``on_note``
  says so once.
* Each child leads its own session (its group is what teardown signals), gets exactly the
  planned environment, cwd, log file and cores, and runs the script with :func:`runpy.run_path`
  (``python -m``: :func:`runpy.run_module`) as ``__main__``.
* Processes that are not ``<this python> script`` / ``<this python> -m module`` (``--no-python``,
  ``--python``, a numactl prefix) start as ordinary subprocesses.
* The zygote ends when its stdin closes (mslaunch ended the job or died) or with mslaunch
  (``PR_SET_PDEATHSIG``, or the watchdog that freezes and kills its tree).
* With a :class:`~launcher.execution.local.zygote_pool.ZygotePool` (the job's, in
  ``LocalSettings``), an attempt's zygote outlives the attempt: the restart forks from it when
  :meth:`~launcher.execution.local.zygote_pool.Zygote.reusable` says it is fit, else a new one
  imports; the pool ends it when the job is over (``LocalBackend.end_job``).  The zygote process
  as mslaunch sees it, and the pool, are in :mod:`launcher.execution.local.zygote_pool`.

Device runtimes (GPU/Ascend) must not start before a fork: the preload is ``import mindspore``
only (host code; runtimes start in the child's ``set_device``/``init``), and the zygote never
calls MindSpore; the CLI still makes the zygote the default on CPU jobs only.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Dict, Optional, Sequence

from launcher.errors import LaunchError
from launcher.execution.backend import Backend, BackendContext
from launcher.execution.local.joinsched import JoinWatch
from launcher.execution.local.zygote_pool import Zygote, ZygotePool
from launcher.execution.ports import check_scheduler_port
from launcher.execution.process.handle import ReportedProcess
from launcher.execution.process.proctree import batch_start_wanted
from launcher.execution.process.spawn import kill_tree, start_local
from launcher.execution.process.watchdog import TOKEN_VAR
from launcher.planning.job.kinds import Role
from launcher.planning.job.spec import Plan, ProcPlan

#: Modules the zygote imports before forking.
PRELOAD = ("mindspore", "mindspore.communication")
#: The scheduler program forked from the zygote (``fork_scheduler``): MindSpore's ``init()`` only.
SCHEDULER_MODULE = "launcher.workloads.scheduler"


class ZygoteProcess(ReportedProcess):
    """A rank forked by the zygote (same interface as :class:`launcher.execution.local.backend.LocalProcess`)."""

    pid: int
    pgid: int

    def __init__(self, plan: ProcPlan, pid: int, log_path: str) -> None:
        self.plan = plan
        self.pid = pid
        self.pgid = pid  # the child calls setsid() first thing
        self.log_path = log_path
        self.started = time.time()
        self.host = plan.host

    def terminate(self) -> None:
        if not self._done.is_set():
            kill_tree(self.pid, self.pgid, signal.SIGTERM)

    def kill(self) -> None:
        kill_tree(self.pid, self.pgid, signal.SIGKILL)


#: Names of a worker's env the zygote does not import under (per-process roles).
_NOT_AT_IMPORT = frozenset({"MS_ROLE", TOKEN_VAR})


def shared_env(plan: Plan) -> Dict[str, str]:
    """The variables every planned worker has with the same value (what the zygote imports
    under, on top of ``os.environ``), without the roles of :data:`_NOT_AT_IMPORT`."""
    envs = [p.env_dict() for p in plan.ranks]
    if not envs:
        return {}
    common = dict(envs[0])
    for env in envs[1:]:
        common = {k: v for k, v in common.items() if env.get(k) == v}
    return {k: v for k, v in common.items() if k not in _NOT_AT_IMPORT}


def python_vars(env: Dict[str, str]) -> Dict[str, str]:
    """The ``PYTHON*`` variables of ``env`` (what an interpreter reads once, at its start)."""
    return {k: v for k, v in env.items() if k.startswith("PYTHON")}


class ZygoteBackend(Backend):
    """Starts Python processes by forking them from one warm zygote; others as subprocesses.

    The local backend with ``LocalSettings(zygote=True)`` (see :meth:`LocalBackend.create`).

    Args:
        preload: modules the zygote imports before forking.
        warm: start the zygote (its import) at once.
        watchdog: the job's watchdog link (the zygote, a subreaper, registers with it).
        preload_env: variables to import under, on top of ``os.environ`` (see :func:`shared_env`).
        fork_scheduler: fork the dynamic cluster's scheduler from the zygote too, running
            :data:`SCHEDULER_MODULE` (MindSpore's ``init()`` alone) instead of the user's script;
            else (and after a fallback) the scheduler is a plain process running the script.
        on_note: called once with a one-line message when the ranks start as plain processes
            instead (the zygote is not fork-safe, ended, or could not start).
        pool: the job's :class:`~launcher.execution.local.zygote_pool.ZygotePool`: the last
            attempt's zygote is taken from it when it is safe to reuse, and handed back to it at
            :meth:`close`; None: it ends with the attempt.
        batch_join: a dynamic cluster's worker joins it under ``SCHED_BATCH``, then gets
            ``SCHED_OTHER`` back (see :mod:`launcher.execution.local.joinsched`).

    Attributes:
        fallback: why the ranks start as plain processes, or None.
        reused: this attempt forks from the last attempt's zygote.
    """

    local_only = True

    def __init__(
        self,
        preload: Sequence[str] = PRELOAD,
        warm: bool = False,
        watchdog: Optional[Any] = None,
        preload_env: Optional[Dict[str, str]] = None,
        on_note: Optional[Callable[[str], None]] = None,
        fork_scheduler: bool = False,
        pool: Optional[ZygotePool] = None,
        batch_join: bool = True,
    ) -> None:
        self.preload = tuple(preload)
        self.fork_scheduler = fork_scheduler
        self.watchdog = watchdog
        self.preload_env = dict(preload_env or {})
        self.on_note = on_note
        self.pool = pool
        self.join: Optional[JoinWatch] = JoinWatch() if batch_join else None
        self.fallback: Optional[str] = None
        self.reused = False
        self._zyg: Optional[Zygote] = None
        self._seen: Optional[Zygote] = None  # the zygote of this attempt, also after close()
        self._lock = threading.Lock()
        if warm:
            with self._lock:
                self._ensure()  # imports while the scheduler starts and binds its port

    @classmethod
    def warm(
        cls,
        watchdog: Optional[Any] = None,
        preload_env: Optional[Dict[str, str]] = None,
        on_note: Optional[Callable[[str], None]] = None,
        fork_scheduler: bool = False,
        pool: Optional[ZygotePool] = None,
    ) -> "ZygoteBackend":
        """A launcher whose zygote starts importing at once (the job's factory), or forks from the
        last attempt's zygote when ``pool`` keeps one that is safe to reuse."""
        return cls(
            warm=True,
            watchdog=watchdog,
            preload_env=preload_env,
            on_note=on_note,
            fork_scheduler=fork_scheduler,
            pool=pool,
        )

    @classmethod
    def create(cls, ctx: BackendContext) -> Backend:
        """Not a backend of its own: :meth:`LocalBackend.create` builds it (with :meth:`warm`) from
        the job's ``LocalSettings(zygote=True)``, whose ``on_note``, ``fork_scheduler`` and
        ``pool`` this context alone would not give."""
        raise NotImplementedError(
            "ZygoteBackend is built by LocalBackend.create (LocalSettings(zygote=True)), "
            "not registered as a backend of its own"
        )

    @classmethod
    def preflight(cls, plan: Plan) -> None:
        check_scheduler_port(plan)

    @property
    def ready_info(self) -> Dict[str, Any]:
        """The zygote's ``ready`` report (``seconds``, ``threads_after_import``)."""
        return self._seen.ready_info if self._seen is not None else {}

    @property
    def process(self) -> Optional["subprocess.Popen[bytes]"]:
        """The zygote process this attempt forks (or forked) from; None when none was needed or it could not start."""
        return self._seen.proc if self._seen is not None else None

    # ------------------------------------------------------------------ zygote process

    def _ensure(self) -> Optional[Zygote]:
        """The zygote, kept from the last attempt or started; None when it cannot start (then ``fallback``)."""
        if self._zyg is not None:
            return self._zyg
        env = self._zygote_env()
        if self.pool is not None:
            refused = len(self.pool.refused)
            self._zyg = self.pool.take(self.preload, env)
            self.reused = self._zyg is not None
            if self.on_note is not None and len(self.pool.refused) > refused:
                self.on_note(
                    f"zygote: the last attempt's zygote is not reused ({self.pool.refused[-1]}); a new one imports"
                )
            if self._zyg is not None:
                self._seen = self._zyg
                return self._zyg
        zyg = Zygote(self.preload, env)
        why = zyg.start(self.watchdog)
        if why is not None:
            self._fall_back(why)
            return None
        self._zyg = self._seen = zyg
        return zyg

    def _zygote_env(self) -> Dict[str, str]:
        """The environment the zygote starts (and imports) under."""
        env = dict(os.environ)
        env.update(self.preload_env)
        return env

    def _fall_back(self, why: str) -> None:
        if self.fallback is None:
            self.fallback = why
            if self.on_note is not None:
                self.on_note(f"zygote: {why}; starting the ranks as plain processes")

    # ------------------------------------------------------------------ Launcher

    def forkable(self, proc: ProcPlan) -> bool:
        """True for ``<this interpreter> script ...`` and ``<this interpreter> -m module ...``."""
        argv = proc.argv
        if len(argv) < 2 or os.path.realpath(argv[0]) != os.path.realpath(sys.executable):
            return False
        if argv[1] == "-m":
            return len(argv) >= 3
        return not argv[1].startswith("-")

    def start(self, proc: ProcPlan, log_path: str, cwd: str) -> Any:
        """Fork ``proc`` from the zygote once it is ready and fork-safe; the scheduler, processes
        that are not forkable, and every process after a fallback start as ordinary subprocesses
        (the scheduler then imports in parallel with the zygote, and the workers, which wait for
        its port anyway, are forked once both are ready)."""
        scheduler = proc.role == Role.SCHEDULER
        if (scheduler and not self.fork_scheduler) or not self.forkable(proc) or self.fallback is not None:
            return start_local(proc, log_path, cwd=cwd, watchdog=self.watchdog)
        env = dict(os.environ)
        env.update(proc.env)
        if self.watchdog is not None:
            env[TOKEN_VAR] = self.watchdog.token
        argv = ["-m", SCHEDULER_MODULE] if scheduler else list(proc.argv[1:])
        zyg_env = self._zyg.env if self._zyg is not None else self._zygote_env()
        if not scheduler and python_vars(env) != python_vars(zyg_env):
            # The interpreter read these at its start (sys.path, hash seed, stdio, warnings...): a
            # rank whose own differ from the zygote's is not what a fork of it would be.
            return start_local(proc, log_path, cwd=cwd, watchdog=self.watchdog)
        title = " ".join([proc.argv[0], *argv])  # what `ps` shows of the plain process
        batch = self.join is not None and not scheduler and batch_start_wanted(env)
        request = {
            "argv": argv,
            "env": env,
            "cwd": cwd,
            "log": log_path,
            "cpus": list(proc.cpus) if proc.cpus else None,
            "title": title,
            "interpreter": proc.argv[0],
            "batch_start": batch,
        }
        early: Optional[int] = None
        with self._lock:
            zyg = self._ensure()
            reply: Dict[str, Any] = {}
            if zyg is not None:
                state = zyg.wait_ready()
                if state != "ready":
                    self._fall_back(state)
                if self.fallback is None:
                    reply = zyg.request(request)
            if "unsafe" in reply:
                self._fall_back(str(reply["unsafe"]))
            if self.fallback is not None:
                return start_local(proc, log_path, cwd=cwd, watchdog=self.watchdog)
            if "pid" not in reply:
                raise LaunchError(f"{proc.name}: the zygote could not start it: {reply.get('error')}")
            assert zyg is not None
            with zyg.cv:
                child = ZygoteProcess(proc, int(reply["pid"]), log_path)
                zyg.children[child.pid] = child
                early = zyg.early.pop(child.pid, None)
        if batch and self.join is not None:
            self.join.watch(child.pid, log_path)
        if early is not None:
            child.exited(early)
        return child

    def keeps(self) -> "set[int]":
        """The zygote's pid while it may serve the next attempt (the orphan reaper spares it)."""
        zyg = self._zyg
        if self.pool is None or zyg is None or self.fallback is not None or not zyg.alive() or zyg.pid is None:
            return set()
        return {zyg.pid}

    def close(self) -> None:
        """Hand the zygote to the pool (a restart may fork from it), or end it."""
        if self.join is not None:
            self.join.close()
        zyg, self._zyg = self._zyg, None
        if zyg is None:
            return
        if self.pool is not None and self.fallback is None and zyg.alive():
            self.pool.put(zyg)
        else:
            zyg.close()
