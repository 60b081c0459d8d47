"""Local processes: one subprocess per planned process, each in its own session (the local
launcher's, and the zygote's, mpirun's and slurm's local pieces).

Each process:

* runs with ``os.environ`` + the plan's env (never mutating ``os.environ``), in its cwd;
* writes stdout and stderr straight into its log file (no pumping thread, no CPU cost);
* leads its own session / process group, so teardown signals the whole group;
* is a child subreaper (Linux): whatever its descendants orphan (``setsid``, double fork) is
  re-parented to it, so its process tree always holds every descendant while it lives;
* with a watchdog (see :mod:`launcher.execution.process.watchdog`): registers itself on the watchdog's
  pipe between fork and exec, and gets ``PR_SET_PDEATHSIG`` = SIGSTOP, so the kernel freezes it
  the moment mslaunch dies and the watchdog then kills its whole tree; without one it gets
  ``PR_SET_PDEATHSIG`` = ``pdeathsig`` (SIGKILL by default).
* runs on its planned cores (``ProcPlan.cpus``: ``sched_setaffinity`` before exec), if any.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import select
import signal
import subprocess
import sys
import threading
import time
from typing import Callable, Dict, List, Optional, Set, Tuple

import psutil

from launcher.errors import LaunchError
from launcher.execution.process.handle import ProcessHandle, WatchdogLink
from launcher.execution.process.proctree import starttime
from launcher.execution.process.watchdog import TOKEN_VAR
from launcher.planning.job.spec import ProcPlan
from launcher.planning.text.private import open_private

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def _load_prctl() -> Optional[Callable[..., int]]:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


# Resolved once in the parent: the child, between fork and exec, only calls it.
_PRCTL = _load_prctl()


def _child_setup(sig: int, watchdog_fd: Optional[int], parent: int, cpus: Optional[Tuple[int, ...]] = None) -> None:
    """In the child before exec: unblock the stop signals (the supervisor blocks them while
    it starts processes), become a child subreaper, register with the watchdog (``+pid
    starttime`` on ``watchdog_fd``), ask the kernel to send ``sig`` when mslaunch dies, and pin
    the process to ``cpus`` (its planned core range; inherited by everything it starts).
    If mslaunch died before the request took effect, exit at once."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, (signal.SIGINT, signal.SIGTERM, signal.SIGHUP))
    if watchdog_fd is not None:
        pid = os.getpid()
        os.write(watchdog_fd, f"+{pid} {starttime(pid)}\n".encode())
    if _PRCTL is not None:
        _PRCTL(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        _PRCTL(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    if os.getppid() != parent:
        os._exit(137)
    if cpus:
        os.sched_setaffinity(0, cpus)


def become_subreaper() -> bool:
    """Make orphaned descendants re-parent to this process instead of init (Linux), so
    :func:`reap_orphans` can find and end what ranks left behind (e.g. under mpirun)."""
    if _PRCTL is None:
        return False
    return _PRCTL(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def reap_orphans(keep: Set[int], passes: int = 50) -> List[int]:
    """SIGKILL every descendant of this process whose pid is not in ``keep``; reap direct ones.

    Popen-owned children must be in ``keep`` (their exit status belongs to their waiter).
    Looks again until a look finds nothing new alive (at most ``passes`` looks): a process may
    fork between a look and its SIGKILL (e.g. the middle of a double fork, already in its own
    session), and its child is only seen by the next look.

    Returns:
        The pids that were killed.
    """
    me = psutil.Process()
    killed: List[int] = []
    for _ in range(passes):
        try:
            found = me.children(recursive=True)
        except psutil.Error:
            break
        victims = [p for p in found if p.pid not in keep and p.pid not in killed and _alive(p)]
        if not victims:
            break
        for proc in victims:
            try:
                proc.send_signal(signal.SIGKILL)
            except psutil.Error:
                pass
        killed += [p.pid for p in victims]
        for proc in victims:
            try:
                os.waitpid(proc.pid, 0)
            except ChildProcessError:
                pass  # not our direct child: its own parent (or init) reaps it
            except OSError:
                pass
    return killed


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def kill_tree(pid: int, pgid: Optional[int], sig: int) -> None:
    """Send ``sig`` to the process group ``pgid`` and to every descendant of ``pid`` (then SIGCONT,
    for any signal but SIGKILL, SIGSTOP and SIGCONT: a stopped process acts on it at once).

    Descendants that left the group (their own session, e.g. under mpirun) are found through
    psutil before signalling, so nothing the process started survives a SIGKILL.
    """
    procs: List[psutil.Process] = []
    try:
        root = psutil.Process(pid)
        procs = root.children(recursive=True)
    except psutil.Error:
        pass
    # A stopped process (SIGSTOP, a terminal's ^Z) holds a SIGTERM until it is continued, so the
    # grace would pass for nothing: SIGCONT follows, as Slurm's and systemd's stops do.
    for s in (sig, signal.SIGCONT) if sig not in (signal.SIGKILL, signal.SIGCONT, signal.SIGSTOP) else (sig,):
        if pgid is not None:
            try:
                os.killpg(pgid, s)
            except (ProcessLookupError, PermissionError):
                pass
        else:
            try:
                os.kill(pid, s)
            except (ProcessLookupError, PermissionError):
                pass
        for child in procs:
            try:
                child.send_signal(s)
            except psutil.Error:
                pass


class _ExitWatcher:
    """One thread per mslaunch that learns of local exits in the kernel's order.

    Each started process's pidfd is registered with one epoll; a pidfd becomes readable when
    its process exits, and epoll returns ready descriptors in the order they became ready.  So
    exits closer together than reaping threads can tell apart (they wake, and take the GIL, in
    any order) still get increasing sequence numbers in the order they happened.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ep: Optional[select.epoll] = None
        self._procs: Dict[int, "LocalProcess"] = {}
        self._seq = itertools.count(1)

    def watch(self, proc: "LocalProcess") -> bool:
        """Start watching ``proc``; False if pidfds are unavailable (or it was reaped)."""
        try:
            fd = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):
            return False
        with self._lock:
            if self._ep is None:
                self._ep = select.epoll()
                threading.Thread(target=self._run, name="exit-watcher", daemon=True).start()
            self._procs[fd] = proc
            self._ep.register(fd, select.EPOLLIN)
        return True

    def _run(self) -> None:
        assert self._ep is not None
        while True:
            for fd, _ in self._ep.poll(1.0):
                with self._lock:
                    proc = self._procs.pop(fd, None)
                    self._ep.unregister(fd)
                os.close(fd)
                if proc is not None:
                    proc._exited(next(self._seq), time.time())


_WATCHER = _ExitWatcher()


class LocalProcess(ProcessHandle):
    """A started local process (subprocess.Popen in its own session).

    Attributes:
        exit_order: increases with the kernel's order of exits of this mslaunch's local
            processes (see :class:`_ExitWatcher`); None until it exited or if unavailable.
        exit_time: epoch seconds of the exit as seen by the exit watcher, or None.
    """

    def __init__(self, plan: ProcPlan, popen: "subprocess.Popen[bytes]", log_path: str) -> None:
        self.plan = plan
        self.popen = popen
        self.pid: int = popen.pid
        self.pgid: int = popen.pid  # start_new_session: the child leads its group
        self.log_path = log_path
        self.started = time.time()
        self.host = plan.host
        self.exit_order: Optional[int] = None
        self.exit_time: Optional[float] = None
        self._exit_seen = threading.Event()
        if not _WATCHER.watch(self):
            self._exit_seen.set()

    def _exited(self, order: int, when: float) -> None:
        self.exit_order, self.exit_time = order, when
        self._exit_seen.set()

    def wait(self) -> int:
        """Block until the process exits; its returncode (negative: signal)."""
        self._exit_seen.wait()
        return self.popen.wait()

    def has_exited(self) -> bool:
        """True once the process has exited, reaped or not (never reaps it)."""
        if self.popen.returncode is not None:
            return True
        try:
            return os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:
            return True

    def poll(self) -> Optional[int]:
        return self.popen.poll()

    def terminate(self) -> None:
        """SIGTERM to its process group."""
        if self.popen.poll() is None:
            kill_tree(self.pid, self.pgid, signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL to its process group and every descendant."""
        kill_tree(self.pid, self.pgid, signal.SIGKILL)

    def group_alive(self) -> bool:
        """True while any process of its group is alive (the leader may be gone already)."""
        try:
            os.killpg(self.pgid, 0)
            return True
        except (ProcessLookupError, PermissionError):
            return False


def start_local(
    plan: ProcPlan,
    log_path: str,
    cwd: Optional[str] = None,
    pdeathsig: int = signal.SIGKILL,
    extra_env: Optional[Dict[str, str]] = None,
    watchdog: Optional["WatchdogLink"] = None,
) -> LocalProcess:
    """Start ``plan`` on this machine with output to ``log_path`` (appended).

    Args:
        plan: the process to start.
        log_path: its log file.
        cwd: override the planned cwd (None: ``plan.cwd``).
        pdeathsig: signal the process gets if mslaunch dies and there is no watchdog.
        extra_env: more variables on top of the plan's (e.g. per-attempt values).
        watchdog: the job's watchdog: the process registers itself with it, carries its token
            in ``MSLAUNCH_JOB_TOKEN`` and is frozen (SIGSTOP) if mslaunch dies.

    Raises:
        LaunchError: the executable or cwd does not exist or cannot be run.
    """
    env = dict(os.environ)
    env.update(plan.env)
    if extra_env:
        env.update(extra_env)
    fd: Optional[int] = None
    if watchdog is not None:
        env[TOKEN_VAR] = watchdog.token
        fd, pdeathsig = watchdog.fd, signal.SIGSTOP
    parent = os.getpid()
    run_dir = cwd if cwd is not None else plan.cwd
    log = os.fdopen(open_private(log_path), "ab", buffering=0)  # 0600: a rank may print its environment
    try:
        popen = subprocess.Popen(
            list(plan.argv),
            cwd=run_dir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=lambda: _child_setup(pdeathsig, fd, parent, plan.cpus),
            close_fds=True,
        )
    except FileNotFoundError as exc:
        missing = exc.filename if exc.filename else plan.argv[0]
        if missing == run_dir or not os.path.isdir(run_dir):
            raise LaunchError(f"{plan.name}: working directory {run_dir} does not exist") from None
        raise LaunchError(
            f"{plan.name}: cannot run {plan.argv[0]!r}: no such file; check the program path or use --no-python "
            "correctly"
        ) from None
    except PermissionError:
        raise LaunchError(f"{plan.name}: cannot run {plan.argv[0]!r}: permission denied (is it executable?)") from None
    except OSError as exc:
        raise LaunchError(f"{plan.name}: cannot start {plan.argv[0]!r}: {exc.strerror}") from None
    finally:
        log.close()
    return LocalProcess(plan, popen, log_path)
