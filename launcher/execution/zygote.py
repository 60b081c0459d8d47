"""The zygote launcher (opt-in, ``mslaunch run --zygote``): import MindSpore once, fork every rank.

Every MindSpore process of a job pays ``import mindspore`` (~1.5 s of CPU here, several seconds
when 8 ranks import at once on 2 cores).  The zygote is one helper process that imports the
preload modules once and then forks each planned Python process from that warm state; the
children share the imported pages copy-on-write.

Protocol (one JSON object per line)::

    mslaunch -> zygote (stdin):  {"argv": [...], "env": {...}, "cwd": "...", "log": "..."}
    zygote -> mslaunch (stdout): {"pid": N} | {"error": "..."}   (one reply per request, in order)
                                 {"exit": N, "status": RC}       (when child N ended; RC < 0: signal)

The zygote ends when its stdin closes (mslaunch ended the job or died) or with mslaunch
(``PR_SET_PDEATHSIG``).  Each child leads its own session (its group is what teardown signals),
gets exactly the planned environment, cwd and log file, and runs the script with
:func:`runpy.run_path` (``python -m``: :func:`runpy.run_module`) as ``__main__``.

The scheduler starts as an ordinary subprocess while the zygote imports (both in parallel),
so the zygote costs no extra wall time before the workers.

Safety: forking is safe only while no device runtime and no threads exist in the zygote.  The
preload imports ``mindspore`` (CPU host code only; GPU/Ascend runtimes start later, in the
child's ``set_device``/``init``) and nothing else; the zygote never calls MindSpore.  Processes
that are not ``<this python> script`` / ``<this python> -m module`` (``--no-python``,
``--python``, a numactl prefix) start as ordinary subprocesses.  That is why it stays opt-in:
it is proven on CPU dynamic clusters here, not on every device and method.
"""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Dict, List, NoReturn, Optional, Sequence

from launcher.errors import LaunchError
from launcher.execution.backend import Backend, BackendContext, ReportedProcess
from launcher.planning.plan import Plan, ProcPlan

#: Modules the zygote imports before forking.
PRELOAD = ("mindspore", "mindspore.communication")


class ZygoteProcess(ReportedProcess):
    """A rank forked by the zygote (same interface as :class:`launcher.execution.local.LocalProcess`)."""

    def __init__(self, plan: ProcPlan, pid: int, log_path: str) -> None:
        self.plan = plan
        self.pid = pid
        self.pgid = pid  # the child calls setsid() first thing
        self.log_path = log_path
        self.started = time.time()
        self.host = plan.host
        self._init_exit()

    def terminate(self) -> None:
        from launcher.execution.local import kill_tree

        if not self._done.is_set():
            kill_tree(self.pid, self.pgid, signal.SIGTERM)

    def kill(self) -> None:
        from launcher.execution.local import kill_tree

        kill_tree(self.pid, self.pgid, signal.SIGKILL)


class ZygoteLauncher(Backend):
    """Starts Python processes by forking them from one warm zygote; others as subprocesses.

    The local backend with ``LocalSettings(zygote=True)`` (see :meth:`LocalLauncher.create`).

    Args:
        preload: modules the zygote imports before forking.
    """

    def __init__(self, preload: Sequence[str] = PRELOAD, warm: bool = False, watchdog: Optional[Any] = None) -> None:
        self.preload = tuple(preload)
        self.watchdog = watchdog  # the job's watchdog link: the zygote (a subreaper) registers with it
        self._proc: Optional["subprocess.Popen[bytes]"] = None
        self._lock = threading.Lock()
        self._replies: "list[Dict[str, Any]]" = []
        self._reply_cv = threading.Condition()
        self._children: Dict[int, ZygoteProcess] = {}
        self._early: Dict[int, int] = {}
        self._reader: Optional[threading.Thread] = None
        if warm:
            with self._lock:
                self._ensure()  # imports while the scheduler starts and binds its port

    @classmethod
    def warm(cls, watchdog: Optional[Any] = None) -> "ZygoteLauncher":
        """A launcher whose zygote starts importing at once (the job's factory)."""
        return cls(warm=True, watchdog=watchdog)

    local_only = True

    @classmethod
    def create(cls, ctx: BackendContext) -> Backend:
        return cls.warm(ctx.watchdog)

    @classmethod
    def preflight(cls, plan: Plan) -> None:
        from launcher.execution.local import check_scheduler_port

        check_scheduler_port(plan)

    # ------------------------------------------------------------------ zygote process

    def _ensure(self) -> "subprocess.Popen[bytes]":
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        from launcher.execution.local import _child_setup
        from launcher.execution.watchdog import TOKEN_VAR

        # Like a local rank: a subreaper registered with the watchdog and carrying the job's token,
        # so a SIGKILL of mslaunch ends the zygote and every process it forked, however deep.
        env = dict(os.environ)
        fd: Optional[int] = None
        sig = signal.SIGKILL
        if self.watchdog is not None:
            env[TOKEN_VAR] = self.watchdog.token
            fd, sig = self.watchdog.fd, signal.SIGSTOP
        parent = os.getpid()
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "launcher.execution.zygote", *self.preload],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
            start_new_session=True, preexec_fn=lambda: _child_setup(sig, fd, parent), close_fds=True,
        )
        self._reader = threading.Thread(target=self._read, name="zygote-reader", daemon=True)
        self._reader.start()
        return self._proc

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
                self._replies.append(msg)
                self._reply_cv.notify_all()
        # The zygote is gone: children it had not reported are lost to us (they die with it).
        with self._reply_cv:
            self._replies.append({"error": "the zygote process ended"})
            self._reply_cv.notify_all()
            pending = [c for c in self._children.values() if c.poll() is None]
        for child in pending:
            child.exited(255)

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
        """Fork ``proc`` from the zygote; the scheduler and non-forkable processes start as
        ordinary subprocesses (the scheduler then imports in parallel with the zygote, and the
        workers, which wait for its port anyway, are forked once both are ready)."""
        if proc.role == "scheduler" or not self.forkable(proc):
            from launcher.execution.local import start_local

            return start_local(proc, log_path, cwd=cwd, watchdog=self.watchdog)
        env = dict(os.environ)
        env.update(proc.env)
        if self.watchdog is not None:
            from launcher.execution.watchdog import TOKEN_VAR

            env[TOKEN_VAR] = self.watchdog.token
        request = {"argv": list(proc.argv[1:]), "env": env, "cwd": cwd, "log": log_path}
        with self._lock:
            zyg = self._ensure()
            assert zyg.stdin is not None
            try:
                zyg.stdin.write((json.dumps(request) + "\n").encode())
                zyg.stdin.flush()
            except (BrokenPipeError, OSError) as exc:
                raise LaunchError(f"{proc.name}: the zygote is gone ({exc})") from None
            with self._reply_cv:
                while not self._replies:
                    self._reply_cv.wait()
                reply = self._replies.pop(0)
                if "pid" in reply:
                    child = ZygoteProcess(proc, int(reply["pid"]), log_path)
                    self._children[child.pid] = child
                    early = self._early.pop(child.pid, None)
            if "pid" not in reply:
                raise LaunchError(f"{proc.name}: the zygote could not start it: {reply.get('error')}")
        if early is not None:
            child.exited(early)
        return child

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


# ---------------------------------------------------------------------- the zygote itself


def _child(request: Dict[str, Any], own_fds: Sequence[int]) -> "NoReturn":
    """In the forked child: become the planned process, run it, exit with its code (never returns)."""
    code = 1
    try:
        _become(request, own_fds)
        code = _run_program(list(request["argv"]))
    except BaseException:  # noqa: BLE001 - setting the child up failed: say why in its log (fd 2)
        import traceback

        try:
            os.write(2, ("mslaunch zygote: " + traceback.format_exc()).encode())
        except OSError:
            pass
        code = 1
    # atexit handlers registered since the fork (e.g. MindSpore's finalize after init()) run and
    # streams are flushed; then os._exit: C++ static destructors of the zygote's MindSpore import
    # wait for threads that do not exist in a forked child and would hang.
    try:
        import atexit

        atexit._run_exitfuncs()  # type: ignore[attr-defined]
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # noqa: BLE001
        pass
    os._exit(code & 0xFF if code >= 0 else 1)


def _become(request: Dict[str, Any], own_fds: Sequence[int]) -> None:
    """Own session, default signals, the zygote's fds closed, stdio on the log, cwd and env."""
    os.setsid()
    import atexit

    atexit._clear()  # type: ignore[attr-defined]  # the zygote's own handlers are not this process's
    for fd in own_fds:
        os.close(fd)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_DFL if sig != signal.SIGINT else signal.default_int_handler)
    signal.set_wakeup_fd(-1)
    fd = os.open(request["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.close(devnull)
    import io

    sys.stdin = open(0, "r", closefd=False)
    unbuffered = bool(request["env"].get("PYTHONUNBUFFERED"))
    sys.stdout = io.TextIOWrapper(open(1, "wb", buffering=0, closefd=False), line_buffering=True, write_through=unbuffered)
    sys.stderr = io.TextIOWrapper(open(2, "wb", buffering=0, closefd=False), line_buffering=True, write_through=True)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])


def _run_program(argv: List[str]) -> int:
    """Run ``script args...`` or ``-m module args...`` as ``__main__``; its exit code."""
    import runpy

    try:
        if argv[0] == "-m":
            sys.argv = [argv[1]] + argv[2:]
            sys.path[0] = os.getcwd()
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            script = argv[0]
            sys.argv = argv
            sys.path[0] = os.path.dirname(os.path.abspath(script))
            runpy.run_path(script, run_name="__main__")
        return 0
    except SystemExit as exc:
        if exc.code is None:
            return 0
        if isinstance(exc.code, int):
            return exc.code
        sys.stderr.write(f"{exc.code}\n")
        return 1
    except BaseException:  # noqa: BLE001 - the script's uncaught exception, as python reports it
        import traceback

        traceback.print_exc()
        return 1


def _preload(preload: Sequence[str]) -> None:
    """Import the preload modules (a missing one is skipped: the ranks import what they need)."""
    import importlib

    os.environ.pop("MS_ROLE", None)
    for name in preload:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    if threading.active_count() > 1:
        sys.stderr.write("zygote: the preload started threads; forking is not safe\n")


def serve(preload: Sequence[str]) -> None:
    """The zygote's main loop (see the module doc)."""
    _preload(preload)
    out = sys.stdout.buffer
    rfd, wfd = os.pipe()
    os.set_blocking(wfd, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wfd)
    stdin = sys.stdin.buffer.raw  # type: ignore[attr-defined]
    buf = b""

    def say(msg: Dict[str, Any]) -> None:
        out.write((json.dumps(msg) + "\n").encode())
        out.flush()

    def reap() -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            rc = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            say({"exit": pid, "status": rc})

    open_input = True
    while open_input:
        try:
            ready, _, _ = select.select([stdin, rfd], [], [])
        except InterruptedError:
            continue
        if rfd in ready:
            os.read(rfd, 4096)
            reap()
        if stdin in ready:
            chunk = os.read(stdin.fileno(), 65536)
            if not chunk:
                open_input = False
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                try:
                    request = json.loads(line)
                    out.flush()
                    pid = os.fork()
                except (ValueError, OSError) as exc:
                    say({"error": str(exc)})
                    continue
                if pid == 0:
                    _child(request, (rfd, wfd))
                say({"pid": pid})
        reap()


if __name__ == "__main__":
    serve(sys.argv[1:])
