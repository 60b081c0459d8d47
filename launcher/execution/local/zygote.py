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
from launcher.execution.backend import Backend, BackendContext, ReportedProcess
from launcher.execution.local.process import _child_setup, check_scheduler_port, kill_tree, start_local
from launcher.execution.local.watchdog import TOKEN_VAR
from launcher.planning.plan import Plan, ProcPlan

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

    Attributes:
        fallback: why the ranks start as plain processes, or None.
        ready_info: the zygote's ``ready`` report (``seconds``, ``threads_after_import``).
    """

    local_only = True

    def __init__(self, preload: Sequence[str] = PRELOAD, warm: bool = False, watchdog: Optional[Any] = None,
                 preload_env: Optional[Dict[str, str]] = None, on_note: Optional[Callable[[str], None]] = None,
                 fork_scheduler: bool = False) -> None:
        self.preload = tuple(preload)
        self.fork_scheduler = fork_scheduler
        self.watchdog = watchdog
        self.preload_env = dict(preload_env or {})
        self.on_note = on_note
        self.fallback: Optional[str] = None
        self.ready_info: Dict[str, Any] = {}
        self._proc: Optional["subprocess.Popen[bytes]"] = None
        self._lock = threading.Lock()
        self._replies: "list[Dict[str, Any]]" = []
        self._reply_cv = threading.Condition()
        self._state: Optional[str] = None  # None: importing; "ready"; or why it cannot fork
        self._children: Dict[int, ZygoteProcess] = {}
        self._early: Dict[int, int] = {}
        self._reader: Optional[threading.Thread] = None
        if warm:
            with self._lock:
                self._ensure()  # imports while the scheduler starts and binds its port

    @classmethod
    def warm(cls, watchdog: Optional[Any] = None, preload_env: Optional[Dict[str, str]] = None,
             on_note: Optional[Callable[[str], None]] = None, fork_scheduler: bool = False) -> "ZygoteBackend":
        """A launcher whose zygote starts importing at once (the job's factory)."""
        return cls(warm=True, watchdog=watchdog, preload_env=preload_env, on_note=on_note, fork_scheduler=fork_scheduler)

    @classmethod
    def create(cls, ctx: BackendContext) -> Backend:
        return cls.warm(ctx.watchdog, shared_env(ctx.plan))

    @classmethod
    def preflight(cls, plan: Plan) -> None:
        check_scheduler_port(plan)

    # ------------------------------------------------------------------ zygote process

    def _ensure(self) -> Optional["subprocess.Popen[bytes]"]:
        """The zygote process, started if needed; None when it cannot start (then ``fallback``)."""
        if self._proc is not None:
            return self._proc
        # Like a local rank: a subreaper registered with the watchdog and carrying the job's token,
        # so a SIGKILL of mslaunch ends the zygote and every process it forked, however deep.
        env = self._zygote_env()
        fd: Optional[int] = None
        sig = signal.SIGKILL
        if self.watchdog is not None:
            env[TOKEN_VAR] = self.watchdog.token
            fd, sig = self.watchdog.fd, signal.SIGSTOP
        parent = os.getpid()
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "launcher.execution.local.zygote_server", *self.preload],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                start_new_session=True, preexec_fn=lambda: _child_setup(sig, fd, parent), close_fds=True,
            )
        except OSError as exc:
            self._fall_back(f"the zygote could not start ({exc.strerror})")
            return None
        self._reader = threading.Thread(target=self._read, name="zygote-reader", daemon=True)
        self._reader.start()
        return self._proc

    def _zygote_env(self) -> Dict[str, str]:
        """The environment the zygote starts (and imports) under."""
        env = dict(os.environ)
        env.update(self.preload_env)
        return env

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for raw in self._proc.stdout:
            try:
                msg = json.loads(raw)
            except ValueError:
                continue
            if "exit" in msg:
                pid, rc = int(msg["exit"]), int(msg["status"])
                with self._reply_cv:
                    child = self._children.get(pid)
                    if child is None:
                        self._early[pid] = rc
                if child is not None:
                    child.exited(rc)
                continue
            with self._reply_cv:
                if self._state is None:  # the first line: ready, or why not
                    self._state = "ready" if "ready" in msg else str(msg.get("unsafe") or msg)
                    self.ready_info = msg.get("ready") or {}
                else:
                    self._replies.append(msg)
                self._reply_cv.notify_all()
        # The zygote is gone: children it had not reported are lost to us (they die with it).
        with self._reply_cv:
            if self._state is None:
                self._state = "the zygote ended during its import"
            self._replies.append({"error": "the zygote process ended"})
            self._reply_cv.notify_all()
            pending = [c for c in self._children.values() if c.poll() is None]
        for child in pending:
            child.exited(255)

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
        if not scheduler and python_vars(env) != python_vars(self._zygote_env()):
            # The interpreter read these at its start (sys.path, hash seed, stdio, warnings...): a
            # rank whose own differ from the zygote's is not what a fork of it would be.
            return start_local(proc, log_path, cwd=cwd, watchdog=self.watchdog)
        title = " ".join([proc.argv[0], *argv])  # what `ps` shows of the plain process
        request = {"argv": argv, "env": env, "cwd": cwd, "log": log_path, "cpus": list(proc.cpus) if proc.cpus else None,
                   "title": title, "interpreter": proc.argv[0]}
        early: Optional[int] = None
        with self._lock:
            zyg = self._ensure()
            reply: Dict[str, Any] = {}
            if zyg is not None:
                with self._reply_cv:
                    while self._state is None:
                        self._reply_cv.wait()
                    if self._state != "ready":
                        self._fall_back(self._state)
                if self.fallback is None:
                    reply = self._request(zyg, request, proc)
            if "unsafe" in reply:
                self._fall_back(str(reply["unsafe"]))
            if self.fallback is not None:
                return start_local(proc, log_path, cwd=cwd, watchdog=self.watchdog)
            if "pid" not in reply:
                raise LaunchError(f"{proc.name}: the zygote could not start it: {reply.get('error')}")
            with self._reply_cv:
                child = ZygoteProcess(proc, int(reply["pid"]), log_path)
                self._children[child.pid] = child
                early = self._early.pop(child.pid, None)
        if early is not None:
            child.exited(early)
        return child

    def _request(self, zyg: "subprocess.Popen[bytes]", request: Dict[str, Any], proc: ProcPlan) -> Dict[str, Any]:
        """Send one fork request; the zygote's reply (under ``self._lock``)."""
        assert zyg.stdin is not None
        try:
            zyg.stdin.write((json.dumps(request) + "\n").encode())
            zyg.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise LaunchError(f"{proc.name}: the zygote is gone ({exc})") from None
        with self._reply_cv:
            while not self._replies:
                self._reply_cv.wait()
            return self._replies.pop(0)

    def close(self) -> None:
        """End the zygote (its stdin closes; it exits)."""
        proc = self._proc
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
        if self._reader is not None:
            self._reader.join(timeout=5)
