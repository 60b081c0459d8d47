"""The job directory's lock (``job.lock``) and claiming a directory for a new job.

The running ``mslaunch run`` holds an exclusive POSIX lock (``lockf``) on ``job.lock`` for the
job's life and removes it after writing ``summary.json``.  :func:`claim_job_dir` takes it (after
checking the directory may hold a new job), :func:`lock_holder` tells who holds it without taking
it, :func:`release_job_dir` drops it.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import struct
from typing import Dict, List, Optional, Tuple

from launcher.errors import MsLaunchError
from launcher.jobs.jobfile import CorruptJobFile, ensure_registry_dir, read_job_file
from launcher.planning.job import layout
from launcher.planning.text.private import PRIVATE_DIR

PLAN_FILE = layout.PLAN_FILE
SUMMARY_FILE = layout.SUMMARY_FILE
JOB_FILE = layout.JOB_FILE
LOCK_FILE = layout.LOCK_FILE
PREVIOUS_DIR = layout.PREVIOUS_DIR
#: Entries an otherwise empty directory may hold and still be used as a new job dir: the lock, a
#: detached run's console log, and the previous job's files (``.previous/``).
_EMPTY_OK = frozenset(
    {
        LOCK_FILE,
        layout.DETACH_LOG,
        PREVIOUS_DIR,
        layout.SBATCH_SCRIPT,
        layout.SBATCH_FILE,
        layout.SBATCH_OUTPUT,
        layout.SBATCH_SECRETS,
    }
)  # written by mslaunch sbatch


class JobLock:
    """The exclusive lock a running job holds on its directory (``job.lock``).

    Held until :meth:`release` or the process ends (also on SIGKILL: the kernel drops it).
    The holding process must not open and close ``job.lock`` elsewhere (a POSIX lock is dropped
    when its process closes any descriptor of the file).
    """

    def __init__(self, path: str, fd: int) -> None:
        self.path = path
        self._fd: Optional[int] = fd

    def release(self) -> None:
        """Remove ``job.lock`` and drop the lock (a finished job dir holds no lock file)."""
        if self._fd is not None:
            try:
                os.unlink(self.path)
            except OSError:
                pass
            os.close(self._fd)
            self._fd = None


_held: Dict[str, JobLock] = {}


def _flock_struct() -> bytes:
    """A ``struct flock`` asking about a write lock on the whole file (Linux layout, padded)."""
    return struct.pack("@hhqqi", fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0).ljust(64, b"\0")


def lock_holder(job_dir: str) -> Optional[int]:
    """The pid of the process holding ``job_dir``'s lock (the job's supervisor), or None.

    None when there is no ``job.lock``, it is not a regular file, or nobody holds it.  Testing
    does not take the lock, so it never disturbs a job that is starting.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(os.path.join(job_dir, LOCK_FILE), flags)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        res = fcntl.fcntl(fd, fcntl.F_GETLK, _flock_struct())
    except OSError:
        return None
    finally:
        os.close(fd)
    l_type, _, _, _, l_pid = struct.unpack_from("@hhqqi", res)
    if l_type == fcntl.F_UNLCK or l_pid <= 0:
        return None
    return l_pid


#: Seconds a process's start time (from ``/proc``: boot time in whole seconds plus clock ticks)
#: may seem to follow ``job.json``'s ``started`` (written by that process) and still be its writer.
_START_SLACK = 2.0


def process_start_time(pid: int) -> Optional[float]:
    """When process ``pid`` started (seconds since the epoch, from ``/proc``), or None if unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        with open("/proc/stat", "rb") as fh:
            btime = next(int(line.split()[1]) for line in fh if line.startswith(b"btime "))
        return btime + int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22 of stat: starttime
    except (OSError, IndexError, ValueError, StopIteration):
        return None


def describe_process(pid: int) -> str:
    """``pid``'s command line for a message (at most 100 characters), or why it is unknown."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        return "a process that has ended"
    except OSError as exc:
        return f"a process whose command line cannot be read ({exc.strerror})"
    text = " ".join(a.decode("utf-8", "replace") for a in raw.split(b"\0") if a) or "a kernel thread or zombie"
    text = "".join(c if c.isprintable() else "?" for c in text)
    return repr(text if len(text) <= 100 else text[:97] + "...")


def holder_is_the_job(job_dir: str, pid: int) -> Tuple[Optional[bool], str]:
    """Whether ``pid``, holding ``job_dir``'s lock, is that job's mslaunch (the one ``stop`` may signal).

    The rule: the job's ``mslaunch run`` takes the lock and then, in the same process, writes
    ``job.json`` naming its own pid and the time (:func:`launcher.jobs.jobdir.register`).  So the
    holder is the job's mslaunch when ``job.json`` names ``pid`` and the process started no later
    than ``job.json``'s ``started`` (a later one reused the pid).  Any other holder (a process that
    merely locked the file, or one that reused a dead mslaunch's pid) is not the job's.  The
    command line is not part of the rule (plugins, ``-c`` drivers and entry points differ), only
    of the message.

    Returns:
        ``(True, "")`` for the job's mslaunch; ``(None, why)`` while ``job.json`` is not written
        yet (the job is starting); ``(False, why)`` for anything else, ``why`` naming the pid and
        what it is.
    """
    path = os.path.join(job_dir, JOB_FILE)
    try:
        record = read_job_file(path, JOB_FILE)
    except CorruptJobFile as exc:
        return False, f"pid {pid} holds {LOCK_FILE} but {exc}; it is {describe_process(pid)}"
    if record is None:
        return None, f"pid {pid} holds {LOCK_FILE} and {JOB_FILE} does not exist yet; it is {describe_process(pid)}"
    what = describe_process(pid)
    if record.get("pid") != pid:
        return False, f"pid {pid} holds {LOCK_FILE} but {JOB_FILE} names pid {record.get('pid')}; pid {pid} is {what}"
    started, began = record.get("started"), process_start_time(pid)
    if started is not None and began is not None and began > float(started) + _START_SLACK:
        return False, (
            f"pid {pid} holds {LOCK_FILE} but started after {JOB_FILE} was written (a reused pid); pid {pid} is {what}"
        )
    return True, ""


def _listdir(path: str) -> List[str]:
    try:
        return sorted(os.listdir(path))
    except OSError as exc:
        raise MsLaunchError(f"cannot read the job directory: {exc.strerror}", path=path) from None


def _busy(path: str, holder: Optional[int]) -> MsLaunchError:
    who = f" (pid {holder})" if holder else ""
    return MsLaunchError(
        f"another mslaunch{who} is running a job in this directory; choose another --log-dir", path=path, exit_code=1
    )


def _check_empty(path: str, locked_here: bool = False) -> None:
    """Raise unless ``path`` holds nothing but entries a new job may find there.

    Args:
        locked_here: this process holds the lock (then the lock is not tested: opening and
            closing ``job.lock`` here would drop it).
    """
    other = [n for n in _listdir(path) if n not in _EMPTY_OK]
    if not other:
        return
    holder = None if locked_here else lock_holder(path)
    if holder is not None:  # a job is being set up or running here (its files may be half-way written)
        raise _busy(path, holder)
    if _holds_finished_job(path, other):
        return  # claim_job_dir moves it to .previous/ under the lock
    if PLAN_FILE in other or JOB_FILE in other or SUMMARY_FILE in other:
        raise MsLaunchError(
            "holds a job that did not finish (no valid summary.json); choose a new --log-dir (or remove this one)",
            path=path,
        )
    shown = ", ".join(other[:3]) + (", ..." if len(other) > 3 else "")
    raise MsLaunchError(
        f"is not empty ({len(other)} entries: {shown}); --log-dir takes a new or empty directory", path=path
    )


def _holds_finished_job(path: str, names: List[str]) -> bool:
    """``path`` holds a job of ours that finished: a valid ``summary.json`` beside its plan or job file."""
    if SUMMARY_FILE not in names or not (PLAN_FILE in names or JOB_FILE in names):
        return False
    try:
        return read_job_file(os.path.join(path, SUMMARY_FILE), SUMMARY_FILE) is not None
    except CorruptJobFile:
        return False


def _rotate_finished_job(path: str) -> None:
    """Move a finished job's entries (all but the lock and a detached run's log) into ``.previous/``.

    Called under the job's lock.  The job before it (an older ``.previous/``) is removed first.
    """
    import shutil

    previous = os.path.join(path, PREVIOUS_DIR)
    names = [n for n in _listdir(path) if n not in _EMPTY_OK]
    if not names:
        return
    try:
        if os.path.lexists(previous):
            if os.path.isdir(previous) and not os.path.islink(previous):
                shutil.rmtree(previous)
            else:
                os.unlink(previous)
        os.mkdir(previous, 0o700)
        for name in names:
            os.rename(os.path.join(path, name), os.path.join(previous, name))
    except OSError as exc:
        raise MsLaunchError(
            f"cannot move the previous job's files to {PREVIOUS_DIR}/: {exc.strerror}", path=path
        ) from None


def prepare_job_dir(path: str, tighten: bool = True) -> bool:
    """Create ``path`` (mode 0700) if missing, else check it is an empty directory of this user's
    and make it 0700 (one line on stderr when that changed its mode) unless a job holds its lock.

    The job's files hold values of the environment (``--env HF_TOKEN=...``), so only their owner
    may list or open them: a directory another user owns is refused (its owner could read them,
    and mslaunch may not change its mode), one of this user's with group or other bits is tightened.

    Args:
        tighten: make an existing directory 0700 here (:func:`claim_job_dir` does it under the lock).

    Returns:
        True when this call created it.

    Raises:
        MsLaunchError: not a directory, cannot be created, owned by another user, not empty, or
            holds a job (nothing is changed on disk then).
    """
    parent = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as exc:
        raise MsLaunchError(f"cannot create the job directory's parent {parent}: {exc.strerror}", path=path) from None
    try:
        os.mkdir(path, 0o700)
        return True
    except FileExistsError:
        pass
    except OSError as exc:
        raise MsLaunchError(f"cannot create job directory: {exc.strerror}", path=path) from None
    if not os.path.isdir(path):
        raise MsLaunchError("exists and is not a directory; --log-dir takes a directory", path=path)
    owner = _owner(path)
    if owner != os.geteuid():
        raise MsLaunchError(
            f"is owned by uid {owner}, not you (uid {os.geteuid()}): its owner could read the job's files, which "
            "may hold --env values; choose a --log-dir of your own",
            path=path,
        )
    _check_empty(path)
    if tighten and lock_holder(path) is None:
        _make_private(path)
    return False


def _owner(path: str) -> int:
    try:
        return os.stat(path).st_uid
    except OSError as exc:
        raise MsLaunchError(f"cannot read the job directory: {exc.strerror}", path=path) from None


def _make_private(path: str) -> None:
    """Give this user's existing job directory mode 0700, saying so on stderr when that changed it."""
    import sys

    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
        if mode == PRIVATE_DIR:
            return
        os.chmod(path, PRIVATE_DIR)
    except OSError as exc:
        raise MsLaunchError(f"cannot make the job directory private (chmod 700): {exc.strerror}", path=path) from None
    sys.stderr.write(
        f"mslaunch: {path}: mode {mode:04o} changed to 0700 (only you may read the job's files: "
        "they may hold --env values)\n"
    )


def claim_job_dir(path: str) -> JobLock:
    """Make ``path`` this job's directory and lock it for the job's life.

    :func:`prepare_job_dir` first: a missing directory is created with mode 0700 (missing parents
    as ``mkdir -p`` does); an existing one must be this user's directory holding nothing (but a
    ``job.lock`` or a detached run's ``mslaunch.log``) and is made 0700.  Then ``job.lock`` is
    locked exclusively without waiting, and the directory is checked once more under the lock.
    A directory that holds a finished job of ours (msrun users re-run with the same
    ``--log_dir``) is accepted: that job's files move to ``.previous/`` under the lock.

    Returns:
        The lock; also kept until :func:`release_job_dir` (or the process's end).

    Raises:
        MsLaunchError: not a directory, cannot be created, not empty, or holds a job (exit 2);
            another mslaunch holds its lock (exit 1).  Nothing is changed on disk then, except a
            directory created here (left empty).
    """
    ensure_registry_dir()
    prepare_job_dir(path, tighten=False)
    lock_path = os.path.join(path, LOCK_FILE)
    created = False
    flags = os.O_RDWR | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        try:
            fd = os.open(lock_path, flags | os.O_CREAT | os.O_EXCL, 0o600)
            created = True
        except FileExistsError:
            fd = os.open(lock_path, flags)
    except OSError as exc:
        raise MsLaunchError(f"cannot open {LOCK_FILE}: {exc.strerror}", path=path) from None
    locked = False
    try:
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise MsLaunchError(f"{LOCK_FILE} is not a regular file", path=path)
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            locked = True
        except OSError as exc:
            if exc.errno not in (errno.EACCES, errno.EAGAIN):
                raise MsLaunchError(f"cannot lock {LOCK_FILE}: {exc.strerror}", path=path) from None
            raise _busy(path, lock_holder(path)) from None
        _check_empty(path, locked_here=True)
        _make_private(path)
        _rotate_finished_job(path)
    except BaseException:
        if created and locked:  # never remove a lock file another run may have locked meanwhile
            try:
                os.unlink(lock_path)
            except OSError:
                pass
        os.close(fd)
        raise
    lock = JobLock(lock_path, fd)
    _held[os.path.abspath(path)] = lock
    return lock


def release_job_dir(path: str) -> None:
    """Drop the lock :func:`claim_job_dir` took on ``path`` (no-op if not held here)."""
    lock = _held.pop(os.path.abspath(path), None)
    if lock is not None:
        lock.release()


def create_job_dir(path: str) -> None:
    """Compatibility name for :func:`claim_job_dir` (the lock is kept until release or exit)."""
    claim_job_dir(path)
