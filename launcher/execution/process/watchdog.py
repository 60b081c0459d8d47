"""The job watchdog: ends every process of a job if mslaunch dies without tearing it down.

mslaunch starts it first (``python -m launcher.execution.process.watchdog <token>``) in its own session,
with a pipe on its stdin whose write end only mslaunch and its just-forked children hold.
Lines on the pipe::

    +<pid> <starttime>   written by each local process itself, between fork and exec (see
                         :func:`launcher.execution.local.backend.start_local`), so a process is known to
                         the watchdog before it runs any code, even if mslaunch is SIGKILLed
                         right after forking it.  ``starttime`` is field 22 of /proc/<pid>/stat
                         (a recycled pid never matches).
    -<pid>               written by mslaunch once it reaped that process.
    run <JSON argv>      a command to run after the kills below, if mslaunch dies (a backend
                         whose processes live outside this machine's process tree, e.g. the
                         slurm backend's ``scancel`` of its job steps); each gets 30 s.
    exit                 mslaunch finished its own teardown: end, after ending what is left of
                         the job all the same (a registered process still running, or any
                         process carrying the job's token): a last guard behind mslaunch's own
                         teardown.

On end-of-file without ``exit`` (mslaunch was killed, even with SIGKILL), every registered
process and every descendant of it is ended.  Each registered process is a child subreaper, so
while it lives, whatever its descendants orphan (``setsid``, double fork) stays below it; and it
was given ``PR_SET_PDEATHSIG`` = SIGSTOP, so the kernel freezes it the moment mslaunch dies.
The watchdog then, in rounds until a round finds nothing new:

1. collects the registered processes, their descendants (from /proc), and every process whose
   environment carries the job's token (``MSLAUNCH_JOB_TOKEN=<token>``; catches descendants of
   a process that already exited, re-parented outside the tree);
2. SIGSTOPs each newly found process (a stopped process cannot fork or exit by itself);
3. SIGKILLs every collected process that is not a registered one, and finally the registered
   ones (so orphans keep re-parenting to a live subreaper until the very end).

Teardown here is hard (SIGKILL, no grace): a SIGKILLed mslaunch cannot report anything anyway,
and its graceful path (SIGINT/SIGTERM to mslaunch) is mslaunch's own teardown.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Dict, Iterable, List, Optional, Set

from launcher.execution.process.proctree import below, kill_quietly, parent_map, starttime

#: Name of the environment variable that marks every process of a job.
TOKEN_VAR = "MSLAUNCH_JOB_TOKEN"


def process_parents() -> Dict[int, int]:
    """pid -> ppid of every process, from /proc."""
    return parent_map()


def _carrying(token: str, pids: Iterable[int]) -> Set[int]:
    """The pids among ``pids`` whose environment holds ``MSLAUNCH_JOB_TOKEN=<token>``."""
    needle = f"{TOKEN_VAR}={token}".encode()
    found: Set[int] = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                env = fh.read()
        except OSError:
            continue
        if needle in env.split(b"\0"):
            found.add(pid)
    return found


def descendants(roots: Iterable[int], parents: Dict[int, int]) -> Set[int]:
    """Every pid below ``roots`` in the ``pid -> ppid`` map ``parents``."""
    return set(below(parents, list(roots)))


def _kill(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        kill_quietly(pid, sig)


def end_all(registered: Dict[int, str], token: Optional[str], rounds: int = 50) -> Set[int]:
    """Freeze then SIGKILL the registered processes, their descendants and the token's carriers.

    Args:
        registered: pid -> starttime of the processes mslaunch started (stale entries skipped).
        token: the job's token, or None.
        rounds: bound on collection rounds.

    Returns:
        Every pid signalled.
    """
    me = os.getpid()
    roots = {pid for pid, st in registered.items() if starttime(pid) == st}
    seen: Set[int] = set()
    for _ in range(rounds):
        parents = process_parents()
        found = (roots | descendants(roots, parents)) & set(parents)
        if token is not None:
            found |= _carrying(token, parents)
        found.discard(me)
        new = found - seen
        _kill(new, signal.SIGSTOP)
        seen |= new
        _kill(found - roots, signal.SIGKILL)
        if not new:
            break
    _kill(roots, signal.SIGKILL)
    # Last sweep: anything the roots' deaths re-parented that still carries the token.
    if token is not None:
        time.sleep(0.05)
        left = _carrying(token, process_parents()) - {me}
        _kill(left, signal.SIGKILL)
        seen |= left
    return seen


def leftovers(registered: Dict[int, str], token: Optional[str]) -> Set[int]:
    """The registered processes still running, and every process carrying the job's token."""
    parents = process_parents()
    found = {pid for pid, st in registered.items() if starttime(pid) == st}
    if token is not None:
        found |= _carrying(token, parents)
    found.discard(os.getpid())
    return found


def on_death(link: "object", argv: List[str]) -> None:
    """Ask the watchdog behind ``link`` (a :class:`Watchdog` or anything with its ``fd``) to run
    ``argv`` if mslaunch dies without tearing the job down."""
    import json

    try:
        os.write(link.fd, ("run " + json.dumps(list(argv)) + "\n").encode())  # type: ignore[attr-defined]  # link: anything with an fd (see the docstring)
    except OSError:
        pass


def _run_cleanups(cleanups: List[List[str]]) -> None:
    for argv in cleanups:
        try:
            subprocess.run(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30
            )
        except (OSError, subprocess.SubprocessError):
            pass


class Watchdog:
    """Client of :mod:`launcher.execution.process.watchdog` (one per ``mslaunch run``).

    Attributes:
        pid: the watchdog's pid.
        token: the job's token (``MSLAUNCH_JOB_TOKEN`` of every local process of the job).
        fd: the write end of the watchdog's pipe (close-on-exec; processes started by
            :func:`launcher.execution.local.backend.start_local` register on it before exec).
    """

    def __init__(self) -> None:
        self.token = os.urandom(16).hex()  # as secrets.token_hex(16), without importing OpenSSL's hashes
        read_end, self.fd = os.pipe()
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "launcher.execution.process.watchdog", self.token],
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


def main(argv: List[str]) -> int:
    token = argv[0] if argv and argv[0] else None
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal ^C is for mslaunch, not for us
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    registered: Dict[int, str] = {}
    cleanups: List[List[str]] = []
    for raw in sys.stdin.buffer:
        line = raw.decode("ascii", "replace").strip()
        if line == "exit":
            # mslaunch's teardown is done; whatever of the job still runs (a process started
            # while the job was being stopped, a fork between its last look and its kill) is
            # ended as if mslaunch had died.
            if leftovers(registered, token):
                end_all(registered, token)
            return 0
        if line.startswith("+"):
            parts = line[1:].split()
            if len(parts) == 2 and parts[0].isdigit():
                registered[int(parts[0])] = parts[1]
        elif line.startswith("-") and line[1:].isdigit():
            registered.pop(int(line[1:]), None)
        elif line.startswith("run "):
            import json

            try:
                argv = json.loads(line[4:])
            except ValueError:
                continue
            if isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv) and argv not in cleanups:
                cleanups.append(argv)
    end_all(registered, token)
    _run_cleanups(cleanups)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
