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
* With a :class:`ZygotePool` (the job's, in ``LocalSettings``), an attempt's zygote outlives the
  attempt: the restart forks from it when :meth:`_Zygote.reusable` says it is fit, else a new
  one imports; the pool ends it when the job is over (``LocalBackend.end_job``).

Device runtimes (GPU/Ascend) must not start before a fork: the preload is ``import mindspore``
only (host code; runtimes start in the child's ``set_device``/``init``), and the zygote never
calls MindSpore; the CLI still makes the zygote the default on CPU jobs only.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Dict, Optional, Sequence

from launcher.errors import LaunchError
from launcher.execution.backend import Backend, BackendContext
from launcher.execution.local.joinsched import JoinWatch, batch_start_wanted
from launcher.execution.ports import check_scheduler_port
from launcher.execution.process.handle import ReportedProcess
from launcher.execution.process.spawn import _child_setup, kill_tree, start_local
from launcher.execution.process.watchdog import TOKEN_VAR
from launcher.planning.job.spec import Plan, ProcPlan

#: Modules the zygote imports before forking.
PRELOAD = ("mindspore", "mindspore.communication")
#: The scheduler program forked from the zygote (``fork_scheduler``): MindSpore's ``init()`` only.
SCHEDULER_MODULE = "launcher.workloads.scheduler"


class ZygoteProcess(ReportedProcess):
    """A rank forked by the zygote (same interface as :class:`launcher.execution.local.backend.LocalProcess`)."""

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


class _Zygote:
    """One zygote process and what mslaunch knows of it (fed by its reader thread).

    A job's attempt uses it through :class:`ZygoteBackend`; a :class:`ZygotePool` may keep it for
    the next attempt (:meth:`reusable` says whether that is safe).
    """

    def __init__(self, preload: Sequence[str], env: Dict[str, str]) -> None:
        self.preload = tuple(preload)
        self.env = env  # what it started (and imported) under
        self.proc: Optional["subprocess.Popen[bytes]"] = None
        self.reader: Optional[threading.Thread] = None
        self.cv = threading.Condition()
        self.state: Optional[str] = None  # None: importing; "ready"; or why it cannot fork
        self.ready_info: Dict[str, Any] = {}
        self.replies: "list[Dict[str, Any]]" = []
        self.children: Dict[int, ZygoteProcess] = {}
        self.early: Dict[int, int] = {}

    @property
    def pid(self) -> Optional[int]:
        return self.proc.pid if self.proc is not None else None

    def start(self, watchdog: Optional[Any]) -> Optional[str]:
        """Start the process; why it could not, or None."""
        # Like a local rank: a subreaper registered with the watchdog and carrying the job's token,
        # so a SIGKILL of mslaunch ends the zygote and every process it forked, however deep.
        env = dict(self.env)
        fd: Optional[int] = None
        sig = signal.SIGKILL
        if watchdog is not None:
            env[TOKEN_VAR] = watchdog.token
            fd, sig = watchdog.fd, signal.SIGSTOP
        parent = os.getpid()
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "launcher.execution.local.zygote_server", *self.preload],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                start_new_session=True, preexec_fn=lambda: _child_setup(sig, fd, parent), close_fds=True,
            )
        except OSError as exc:
            return f"the zygote could not start ({exc.strerror})"
        self.reader = threading.Thread(target=self._read, name="zygote-reader", daemon=True)
        self.reader.start()
        return None

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                msg = json.loads(raw)
            except ValueError:
                continue
            if "exit" in msg:
                pid, rc = int(msg["exit"]), int(msg["status"])
                with self.cv:
                    child = self.children.get(pid)
                    if child is None:
                        self.early[pid] = rc
                if child is not None:
                    child.exited(rc)
                continue
            with self.cv:
                if self.state is None:  # the first line: ready, or why not
                    self.state = "ready" if "ready" in msg else str(msg.get("unsafe") or msg)
                    self.ready_info = msg.get("ready") or {}
                else:
                    self.replies.append(msg)
                self.cv.notify_all()
        # The zygote is gone: children it had not reported are lost to us (they die with it).
        with self.cv:
            if self.state is None:
                self.state = "the zygote ended during its import"
            self.replies.append({"error": "the zygote process ended"})
            self.cv.notify_all()
            pending = [c for c in self.children.values() if c.poll() is None]
        for child in pending:
            child.exited(255)

    def wait_ready(self) -> str:
        """``ready``, or why it cannot fork (waits for the end of its import)."""
        with self.cv:
            while self.state is None:
                self.cv.wait()
            return self.state

    def request(self, message: Dict[str, Any], timeout: Optional[float] = None) -> Dict[str, Any]:
        """Send one request; the zygote's reply (``{"error": ...}`` when it is gone or silent
        for ``timeout`` seconds).  Callers serialize their requests."""
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(message) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            return {"error": f"the zygote is gone ({exc})"}
        with self.cv:
            if not self.cv.wait_for(lambda: bool(self.replies), timeout):
                return {"error": f"the zygote did not answer within {timeout:g} s"}
            return self.replies.pop(0)

    def alive(self) -> bool:
        """Running, and ready to fork or still importing."""
        return self.proc is not None and self.proc.poll() is None and self.state in (None, "ready")

    def reusable(self, env: Dict[str, str], timeout: float = 10.0) -> Optional[str]:
        """None when a new attempt may fork from this zygote as from a new one; else why not.

        Safe when: it is alive and answers; it imported under the same environment (but the
        launcher's own ``MSLAUNCH_*`` variables, e.g. the attempt number, which no import
        reads); it is still a single-threaded process; and nothing of the last attempt is left
        under it (every process it forked, or adopted as a subreaper, has ended and been reaped:
        its answer comes after it reported those exits).  Then its records of the last attempt
        are dropped, so a recycled pid is never taken for an old one.
        """
        if not self.alive():
            return "it ended"
        if _comparable(self.env) != _comparable(env):
            return "the new attempt's environment differs from the one it imported under"
        state = self.wait_ready()
        if state != "ready":
            return state
        end = time.monotonic() + timeout
        while True:
            reply = self.request({"ping": True}, max(0.1, end - time.monotonic()))
            pong = reply.get("pong")
            if not isinstance(pong, dict):
                return f"it did not answer ({reply.get('error') or reply})"
            if len(pong.get("threads") or ()) > 1:
                return f"it has {len(pong['threads'])} threads"
            if not pong.get("children"):
                break
            if time.monotonic() >= end:
                return f"{len(pong['children'])} process(es) of the last attempt still run under it"
            time.sleep(0.05)
        with self.cv:
            self.children.clear()
            self.early.clear()
        return None

    def close(self) -> None:
        """End the zygote (its stdin closes; it exits)."""
        proc = self.proc
        if proc is None:
            return
        try:
            assert proc.stdin is not None
            proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if self.reader is not None:
            self.reader.join(timeout=5)


def _comparable(env: Dict[str, str]) -> Dict[str, str]:
    return {k: v for k, v in env.items() if not k.startswith("MSLAUNCH_")}


class ZygotePool:
    """Keeps a job's zygote from one attempt to the next (a restart forks from the warm one).

    The attempt's backend hands its zygote back at :meth:`ZygoteBackend.close`; the next
    attempt's backend takes it if :meth:`_Zygote.reusable` (else it is ended and a new one
    imports).  :meth:`close` ends what is kept (the job is over).  One job at a time.

    Attributes:
        reused: how many attempts forked from a kept zygote.
        refused: why a kept zygote was not reused, one line per time.
    """

    def __init__(self, settle: float = 10.0) -> None:
        self.settle = settle  # seconds the last attempt's processes get to be reaped under a kept zygote
        self._kept: Optional[_Zygote] = None
        self._lock = threading.Lock()
        self.reused = 0
        self.refused: "list[str]" = []

    def put(self, zyg: _Zygote) -> None:
        with self._lock:
            old, self._kept = self._kept, zyg
        if old is not None and old is not zyg:
            old.close()

    def take(self, preload: Sequence[str], env: Dict[str, str]) -> Optional[_Zygote]:
        """The kept zygote if it is safe to reuse for ``preload`` under ``env``; else None (it is ended)."""
        with self._lock:
            zyg, self._kept = self._kept, None
        if zyg is None:
            return None
        why = "it imported other modules" if zyg.preload != tuple(preload) else zyg.reusable(env, self.settle)
        if why is None:
            self.reused += 1
            return zyg
        self.refused.append(why)
        zyg.close()
        return None

    def pids(self) -> "set[int]":
        with self._lock:
            pid = self._kept.pid if self._kept is not None else None
        return {pid} if pid is not None else set()

    def close(self) -> None:
        with self._lock:
            zyg, self._kept = self._kept, None
        if zyg is not None:
            zyg.close()


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
        pool: the job's :class:`ZygotePool`: the last attempt's zygote is taken from it when it is
            safe to reuse, and handed back to it at :meth:`close`; None: it ends with the attempt.
        batch_join: a dynamic cluster's worker joins it under ``SCHED_BATCH``, then gets
            ``SCHED_OTHER`` back (see :mod:`launcher.execution.local.joinsched`).

    Attributes:
        fallback: why the ranks start as plain processes, or None.
        reused: this attempt forks from the last attempt's zygote.
    """

    local_only = True

    def __init__(self, preload: Sequence[str] = PRELOAD, warm: bool = False, watchdog: Optional[Any] = None,
                 preload_env: Optional[Dict[str, str]] = None, on_note: Optional[Callable[[str], None]] = None,
                 fork_scheduler: bool = False, pool: Optional[ZygotePool] = None, batch_join: bool = True) -> None:
        self.preload = tuple(preload)
        self.fork_scheduler = fork_scheduler
        self.watchdog = watchdog
        self.preload_env = dict(preload_env or {})
        self.on_note = on_note
        self.pool = pool
        self.join: Optional[JoinWatch] = JoinWatch() if batch_join else None
        self.fallback: Optional[str] = None
        self.reused = False
        self._zyg: Optional[_Zygote] = None
        self._seen: Optional[_Zygote] = None  # the zygote of this attempt, also after close()
        self._lock = threading.Lock()
        if warm:
            with self._lock:
                self._ensure()  # imports while the scheduler starts and binds its port

    @classmethod
    def warm(cls, watchdog: Optional[Any] = None, preload_env: Optional[Dict[str, str]] = None,
             on_note: Optional[Callable[[str], None]] = None, fork_scheduler: bool = False,
             pool: Optional[ZygotePool] = None) -> "ZygoteBackend":
        """A launcher whose zygote starts importing at once (the job's factory), or forks from the
        last attempt's zygote when ``pool`` keeps one that is safe to reuse."""
        return cls(warm=True, watchdog=watchdog, preload_env=preload_env, on_note=on_note, fork_scheduler=fork_scheduler, pool=pool)

    @classmethod
    def create(cls, ctx: BackendContext) -> Backend:
        return cls.warm(ctx.watchdog, shared_env(ctx.plan))

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

    def _ensure(self) -> Optional[_Zygote]:
        """The zygote, kept from the last attempt or started; None when it cannot start (then ``fallback``)."""
        if self._zyg is not None:
            return self._zyg
        env = self._zygote_env()
        if self.pool is not None:
            refused = len(self.pool.refused)
            self._zyg = self.pool.take(self.preload, env)
            self.reused = self._zyg is not None
            if self.on_note is not None and len(self.pool.refused) > refused:
                self.on_note(f"zygote: the last attempt's zygote is not reused ({self.pool.refused[-1]}); a new one imports")
            if self._zyg is not None:
                self._seen = self._zyg
                return self._zyg
        zyg = _Zygote(self.preload, env)
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
        scheduler = proc.role == "scheduler"
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
        request = {"argv": argv, "env": env, "cwd": cwd, "log": log_path, "cpus": list(proc.cpus) if proc.cpus else None,
                   "title": title, "interpreter": proc.argv[0], "batch_start": batch}
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
        if batch:
            self.join.watch(child.pid, log_path)  # type: ignore[union-attr]
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
