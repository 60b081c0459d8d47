"""The zygote process itself (stdlib only): import the preload once, check it is safe to fork,
then fork one child per request.  Started by :class:`launcher.execution.zygote.ZygoteLauncher`
as ``python -m launcher.execution.zygote_server MODULE...``.

Protocol (one JSON object per line)::

    mslaunch -> zygote (stdin):  {"argv": [...], "env": {...}, "cwd": "...", "log": "...", "cpus": [..] | null}
    zygote -> mslaunch (stdout): first {"ready": {"seconds": S}} or {"unsafe": "why"} (then it exits);
                                 then one reply per request, in order:
                                 {"pid": N} | {"error": "..."} | {"unsafe": "why"}
                                 and {"exit": N, "status": RC} when child N ended (RC < 0: signal)

Fork safety (see docs/cpu-performance.md): a fork copies only the forking thread; a lock held by
any other thread stays locked forever in the child.  After the preload the zygote must therefore
be a single-threaded process.  ``import numpy`` starts OpenBLAS's worker pool (``N - 1`` threads,
idle in ``futex_wait``; ``import mindspore`` adds none); OpenBLAS registers a ``pthread_atfork``
handler that joins that pool before every fork, and the pool stays down until the next BLAS call
(the zygote makes none; a child re-creates it, the same size, at its first one).  So the check
is: list ``/proc/self/task``; if there is more than the main thread, fork once (a child that
exits at once) to let such handlers run, and list again.  Anything still there is a thread no
handler stops: the zygote answers ``unsafe`` and exits, and the launcher starts the ranks as
plain processes.  Before every later fork the zygote checks again that it has one thread.
"""
from __future__ import annotations

import json
import os
import select
import signal
import sys
import time
from typing import Any, Dict, List, NoReturn, Optional, Sequence


def threads() -> List[str]:
    """This process's threads as ``tid:comm`` (from ``/proc/self/task``)."""
    out = []
    for tid in sorted(os.listdir("/proc/self/task"), key=int):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                out.append(f"{tid}:{f.read().strip()}")
        except OSError:
            pass  # ended meanwhile
    return out


def fork_safety(preload: Sequence[str], before: List[str]) -> Optional[str]:
    """None when this process is single-threaded (after letting ``pthread_atfork`` handlers stop
    their pools with one throw-away fork); else why forking from it is not safe.  ``before``:
    the threads found after the import (:func:`threads`)."""
    if len(before) > 1:
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
    found = threads()
    if len(found) <= 1:
        return None
    names = ", ".join(t.split(":", 1)[1] for t in found[1:])
    what = f"importing {', '.join(preload)}" if preload else "start-up"
    return f"{len(found) - 1} thread(s) besides the main one after {what} ({names}), not stopped at a fork"


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
    """Own session, default signals, the zygote's fds closed, stdio on the log, cwd, env, cores."""
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
    if request.get("cpus"):
        os.sched_setaffinity(0, [int(c) for c in request["cpus"]])


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


def serve(preload: Sequence[str]) -> None:
    """The zygote's main loop (see the module doc)."""
    out = sys.stdout.buffer
    started = time.monotonic()

    def say(msg: Dict[str, Any]) -> None:
        out.write((json.dumps(msg) + "\n").encode())
        out.flush()

    _preload(preload)
    before = threads()
    why = fork_safety(preload, before)
    if why is not None:
        say({"unsafe": why})
        return
    say({"ready": {"seconds": round(time.monotonic() - started, 3), "threads_after_import": before}})
    rfd, wfd = os.pipe()
    os.set_blocking(wfd, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wfd)
    stdin = sys.stdin.buffer.raw  # type: ignore[attr-defined]
    buf = b""

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
                except ValueError as exc:
                    say({"error": str(exc)})
                    continue
                found = threads()
                if len(found) > 1:  # something started a thread since: fork no more
                    say({"unsafe": f"{len(found) - 1} thread(s) appeared in the zygote ({', '.join(found[1:])})"})
                    continue
                try:
                    out.flush()
                    pid = os.fork()
                except OSError as exc:
                    say({"error": str(exc)})
                    continue
                if pid == 0:
                    _child(request, (rfd, wfd))
                say({"pid": pid})
        reap()


if __name__ == "__main__":
    serve(sys.argv[1:])
