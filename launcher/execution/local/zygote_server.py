"""The zygote process itself (stdlib only): import the preload once, check it is safe to fork,
then fork one child per request.  Started by :class:`launcher.execution.local.zygote.ZygoteBackend`
as ``python -m launcher.execution.local.zygote_server MODULE...``.

Protocol (one JSON object per line)::

    mslaunch -> zygote (stdin):  {"argv": [...], "env": {...}, "cwd": "...", "log": "...", "cpus": [..] | null,
                                  "batch_start": bool (start under SCHED_BATCH: joinsched.py)}
    mslaunch -> zygote (stdin):  {"ping": true}  (is it fit to serve another attempt?)
    zygote -> mslaunch (stdout): first {"ready": {"seconds": S}} or {"unsafe": "why"} (then it exits);
                                 then one reply per request, in order:
                                 {"pid": N} | {"error": "..."} | {"unsafe": "why"}
                                 | {"pong": {"threads": [...], "children": [pids]}} (after reaping:
                                 every ended child's exit is reported before it)
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

A forked child becomes the planned process in :mod:`launcher.execution.local.zygote_child`.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import time
from typing import Any, Dict, List, Optional, Sequence

# Imported here, at the server's start and before the preload: the child's module captures this
# interpreter's start-up state (its signal dispositions, libc) as a new process has it.
try:  # sent to a remote host as source (launcher.execution.ssh.remote_zygote), zygote_child's comes first
    from launcher.execution.local.zygote_child import record_preload_env, run_child, title_setup
    from launcher.execution.process.fastjoin import drop_shim, shim_loaded
except ImportError:
    pass


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


def children() -> List[int]:
    """The pids of this process's live children (forked, or adopted as a subreaper), from
    ``/proc/self/task/<tid>/children``; zombies not yet reaped count too."""
    out: List[int] = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/children") as f:
                out.extend(int(p) for p in f.read().split())
        except OSError:
            pass
    return sorted(out)


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


def _preload(preload: Sequence[str]) -> None:
    """Import the preload modules (a missing one is skipped: the ranks import what they need)."""
    import importlib

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

    title_setup()
    drop_shim(os.environ)  # loaded already (launcher.execution.process.fastjoin); nothing it starts inherits it
    os.environ.pop("MS_ROLE", None)
    env_before = dict(os.environ)
    _preload(preload)
    record_preload_env(env_before, dict(os.environ))
    before = threads()
    why = fork_safety(preload, before)
    if why is not None:
        say({"unsafe": why})
        return
    seconds = round(time.monotonic() - started, 3)
    say({"ready": {"seconds": seconds, "threads_after_import": before, "fast_join": shim_loaded()}})
    rfd, wfd = os.pipe()
    os.set_blocking(wfd, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wfd)
    stdin = sys.stdin.buffer.raw  # type: ignore[union-attr]  # stdin is a buffered file here: its .raw exists
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
                if request.get("ping"):  # after the exits of every child that ended (reported first)
                    reap()
                    say({"pong": {"threads": threads(), "children": children()}})
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
                    run_child(request, (rfd, wfd))
                say({"pid": pid})
        reap()


if __name__ == "__main__":
    serve(sys.argv[1:])
