"""Job directories and the job registry behind ``ps`` / ``status`` / ``stop`` / ``logs``.

Job directory (``--log-dir``, default ``./mslaunch_logs/<job-id>/``): see
:mod:`launcher.planning.layout` for its files.  :func:`claim_job_dir` creates it with mode 0700
when it is missing; an existing directory is used only when it is empty and keeps its mode
(mslaunch never changes the mode of a directory it did not create).  Besides the plan's files
mslaunch writes there:

* ``job.lock``: the running ``mslaunch run`` holds an exclusive POSIX lock (``lockf``) on it for
  the job's life and removes it after writing ``summary.json`` (a job whose mslaunch was killed
  keeps an unlocked one).  It is how a second run on the same directory is refused, how ``ps`` tells a
  running job from a lost one, and which pid ``stop`` signals (the lock's holder, so a reused pid
  is never signalled).
* ``job.json``: ``{"job_id", "pid", "started", "argv", "state": "running"}``, written at start.

Registry: ``$MSLAUNCH_HOME/jobs/<job-id>.json`` (default ``~/.mslaunch``) with
``{"job_id", "job_dir", "pid", "started", "argv"}``: it points at the job dir, which holds the
truth (``summary.json`` once the job ended).  Job ids are checked by :func:`validate_job_id`,
so a registry file never lies outside ``$MSLAUNCH_HOME/jobs``.

Every job file (registry entries, ``job.json``, ``plan.json``, ``summary.json``) is read through
:func:`read_job_file`, which validates it; a bad one makes only its own job ``corrupt``.

States (``job_state``): ``running`` (the lock is held), ``succeeded`` / ``failed`` / ``timeout``
/ ``stopped`` (from summary.json), ``lost`` (no lock holder and no summary), ``corrupt`` (a job
file or the registry entry is unreadable or malformed; :attr:`JobInfo.problem` says why).
"""
from __future__ import annotations

import errno
import fcntl
import json
import math
import os
import re
import stat
import struct
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple

from launcher.errors import JobError, MsLaunchError
from launcher.jobs.files import write_atomic
from launcher.planning import layout
from launcher.planning.kinds import JobStatus

PLAN_FILE = layout.PLAN_FILE
SUMMARY_FILE = layout.SUMMARY_FILE
JOB_FILE = layout.JOB_FILE
LOCK_FILE = layout.LOCK_FILE
#: The detached run's console log (written by ``run --detach`` before the job claims the dir).
DETACH_LOG = layout.DETACH_LOG
#: Entries an otherwise empty directory may hold and still be used as a new job dir.
#: Where a finished job's files go when a new run reuses its ``--log-dir`` (msrun users re-run with
#: the same ``--log_dir``): one previous job is kept, the one before it is removed.
PREVIOUS_DIR = layout.PREVIOUS_DIR
_EMPTY_OK = frozenset({LOCK_FILE, DETACH_LOG, PREVIOUS_DIR})

#: Job files larger than this are reported as corrupt instead of being read.
MAX_JOB_FILE_BYTES = 64 * 1024 * 1024
#: Longest job id accepted.
MAX_JOB_ID_LEN = 128
_JOB_ID_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*\Z")
_MAX_PID = 2 ** 31 - 1


class CorruptJobFile(JobError):
    """A job file exists but cannot be used (not a regular file, not JSON, wrong types...)."""


def validate_job_id(job_id: str, field: str = "--job-id") -> str:
    """Return ``job_id`` if it is safe as a file name, else raise.

    A job id is 1..128 characters of ``A-Z a-z 0-9 . _ -``, starts with a letter, digit or
    ``_``, and holds no ``..``: it names ``$MSLAUNCH_HOME/jobs/<id>.json`` and the default
    ``./mslaunch_logs/<id>/`` and can never point anywhere else.

    Raises:
        JobError: naming ``field`` and what is wrong.
    """
    if not isinstance(job_id, str) or not job_id:
        raise JobError("a job id must not be empty", field=field)
    if len(job_id) > MAX_JOB_ID_LEN:
        raise JobError(f"a job id has at most {MAX_JOB_ID_LEN} characters, got {len(job_id)}", field=field)
    if not _JOB_ID_RE.match(job_id) or ".." in job_id:
        raise JobError(f"bad job id {job_id!r}: use letters, digits, '.', '_' and '-', starting with a letter, digit or '_', without '..'",
                       field=field)
    return job_id


def mslaunch_home(environ: Optional[Dict[str, str]] = None) -> str:
    env = os.environ if environ is None else environ
    if env.get("MSLAUNCH_HOME"):
        return env["MSLAUNCH_HOME"]
    return os.path.join(os.path.expanduser("~"), ".mslaunch")


def registry_dir() -> str:
    return os.path.join(mslaunch_home(), "jobs")


def ensure_registry_dir() -> str:
    """Create ``$MSLAUNCH_HOME/jobs`` (mode 0700) if missing; return it.

    Raises:
        JobError: it cannot be created or is not a writable directory.
    """
    folder = registry_dir()
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise JobError(f"cannot create the job registry: {exc.strerror}; check $MSLAUNCH_HOME", path=folder) from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise JobError("the job registry is not writable; check $MSLAUNCH_HOME", path=folder)
    return folder


def registry_path(job_id: str) -> str:
    """``$MSLAUNCH_HOME/jobs/<job_id>.json`` for a valid id (raises JobError otherwise)."""
    return os.path.join(registry_dir(), validate_job_id(job_id) + ".json")


# --- the one validating reader ------------------------------------------------------------------

def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _check_str(v: Any) -> Optional[str]:
    return None if isinstance(v, str) else "a string"


def _check_opt_str(v: Any) -> Optional[str]:
    return None if v is None or isinstance(v, str) else "a string or null"


def _check_job_id(v: Any) -> Optional[str]:
    try:
        validate_job_id(v)
    except JobError:
        return "a valid job id"
    return None


def _check_count(v: Any) -> Optional[str]:
    return None if _is_int(v) and 0 <= v <= 10 ** 9 else "a whole number >= 0"


def _check_opt_int(v: Any) -> Optional[str]:
    return None if v is None or (_is_int(v) and abs(v) < 2 ** 63) else "a whole number or null"


def _check_pid(v: Any) -> Optional[str]:
    return None if v is None or (_is_int(v) and 0 < v <= _MAX_PID) else "a process id or null"


def _check_time(v: Any) -> Optional[str]:
    ok = v is None or ((_is_int(v) or isinstance(v, float)) and math.isfinite(v) and 0 <= v < 1e11)
    return None if ok else "a time in seconds since the epoch or null"


def _check_status(v: Any) -> Optional[str]:
    return None if isinstance(v, str) and re.match(r"[a-z_]{1,32}\Z", v) else "a status word"


def _check_abs_path(v: Any) -> Optional[str]:
    return None if isinstance(v, str) and os.path.isabs(v) and "\x00" not in v else "an absolute path"


def _check_cause(v: Any) -> Optional[str]:
    if v is None:
        return None
    if not isinstance(v, dict):
        return "an object or null"
    for key in ("name", "host", "reason", "log"):
        if key in v and not isinstance(v[key], str):
            return f"an object whose {key!r} is a string"
    if "tail" in v and not (isinstance(v["tail"], list) and all(isinstance(x, str) for x in v["tail"])):
        return "an object whose 'tail' is a list of strings"
    return None


def _check_argv(v: Any) -> Optional[str]:
    return None if isinstance(v, list) and all(isinstance(x, str) for x in v) else "a list of strings"


_Check = Callable[[Any], Optional[str]]
#: Per kind of job file: field -> (check, required).  Only fields mslaunch reads are checked;
#: others are kept as they are.
SCHEMAS: Dict[str, Dict[str, Tuple[_Check, bool]]] = {
    "registry": {"job_id": (_check_job_id, True), "job_dir": (_check_abs_path, True), "pid": (_check_pid, False),
                 "started": (_check_time, False), "argv": (_check_argv, False)},
    JOB_FILE: {"job_id": (_check_job_id, True), "pid": (_check_pid, False), "started": (_check_time, False)},
    PLAN_FILE: {"job_id": (_check_job_id, True), "world_size": (_check_count, True)},
    SUMMARY_FILE: {"status": (_check_status, True), "exit_code": (_check_opt_int, False), "root_cause": (_check_cause, False),
                   "message": (_check_opt_str, False), "job_id": (_check_str, False)},
}


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def parse_job_file(data: bytes, kind: str, path: str) -> Dict[str, Any]:
    """Decode and validate the bytes of a job file of ``kind`` (a key of :data:`SCHEMAS`).

    Returns:
        The JSON object.

    Raises:
        CorruptJobFile: naming ``path`` and, where it is a field, the field; the message says what
            is wrong (empty, not UTF-8, not JSON with line:col, not an object, a field's type).
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CorruptJobFile(f"not UTF-8 text (byte {exc.start})", path=path) from None
    if not text.strip():
        raise CorruptJobFile("empty file", path=path)
    try:
        obj = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as exc:
        raise CorruptJobFile(f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}", path=path) from None
    except RecursionError:
        raise CorruptJobFile("not usable JSON: nested too deeply", path=path) from None
    except ValueError as exc:
        raise CorruptJobFile(f"not usable JSON: {exc}", path=path) from None
    if not isinstance(obj, dict):
        kind_name = {list: "array", str: "string", int: "number", float: "number", bool: "boolean"}.get(type(obj), "null")
        raise CorruptJobFile(f"holds a JSON {kind_name}, not an object", path=path)
    for key, (check, required) in SCHEMAS[kind].items():
        if key not in obj:
            if required:
                raise CorruptJobFile("missing", path=path, field=key)
            continue
        want = check(obj[key])
        if want is not None:
            shown = repr(obj[key])
            shown = shown if len(shown) <= 40 else shown[:37] + "..."
            raise CorruptJobFile(f"must be {want}, got {shown}", path=path, field=key)
    return obj


def read_job_file(path: str, kind: str) -> Optional[Dict[str, Any]]:
    """Read and validate one job file; the only way mslaunch reads its job files back.

    The file is opened without following a symbolic link and without blocking (a FIFO or device
    in its place is rejected, never read), and at most :data:`MAX_JOB_FILE_BYTES` are read.

    Args:
        path: the file.
        kind: ``"registry"``, :data:`JOB_FILE`, :data:`PLAN_FILE` or :data:`SUMMARY_FILE`.

    Returns:
        The validated JSON object, or None when ``path`` does not exist.

    Raises:
        CorruptJobFile: it exists but is a symlink, not a regular file, unreadable, too large, or
            fails :func:`parse_job_file`.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise CorruptJobFile("is a symbolic link (mslaunch writes regular files only)", path=path) from None
        if exc.errno == errno.ENOTDIR:
            return None
        raise CorruptJobFile(f"cannot read: {exc.strerror or exc}", path=path) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise CorruptJobFile("is not a regular file", path=path)
        if st.st_size > MAX_JOB_FILE_BYTES:
            raise CorruptJobFile(f"is {st.st_size} bytes, larger than the {MAX_JOB_FILE_BYTES} a job file may be", path=path)
        chunks: List[bytes] = []
        total = 0
        while total <= MAX_JOB_FILE_BYTES:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > MAX_JOB_FILE_BYTES:
            raise CorruptJobFile(f"is larger than the {MAX_JOB_FILE_BYTES} bytes a job file may be", path=path)
    except OSError as exc:
        raise CorruptJobFile(f"cannot read: {exc.strerror or exc}", path=path) from None
    finally:
        os.close(fd)
    return parse_job_file(b"".join(chunks), kind, path)


# --- writing -------------------------------------------------------------------------------------

def write_json(path: str, obj: Any, mode: int = 0o600) -> None:
    """Write ``obj`` as JSON atomically (readers see the old file or the whole new one)."""
    write_atomic(path, json.dumps(obj, indent=2, sort_keys=False) + "\n", mode=mode)


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


def _listdir(path: str) -> List[str]:
    try:
        return sorted(os.listdir(path))
    except OSError as exc:
        raise MsLaunchError(f"cannot read the job directory: {exc.strerror}", path=path) from None


def _busy(path: str, holder: Optional[int]) -> MsLaunchError:
    who = f" (pid {holder})" if holder else ""
    return MsLaunchError(f"another mslaunch{who} is running a job in this directory; choose another --log-dir", path=path, exit_code=1)


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
        raise MsLaunchError("holds a job that did not finish (no valid summary.json); choose a new --log-dir "
                            "(or remove this one)", path=path)
    shown = ", ".join(other[:3]) + (", ..." if len(other) > 3 else "")
    raise MsLaunchError(f"is not empty ({len(other)} entries: {shown}); --log-dir takes a new or empty directory", path=path)


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
        raise MsLaunchError(f"cannot move the previous job's files to {PREVIOUS_DIR}/: {exc.strerror}", path=path) from None


def prepare_job_dir(path: str) -> bool:
    """Create ``path`` (mode 0700) if missing, else check it is an empty directory; never chmod.

    Returns:
        True when this call created it.

    Raises:
        MsLaunchError: not a directory, cannot be created, not empty, or holds a job.
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
    _check_empty(path)
    return False


def claim_job_dir(path: str) -> JobLock:
    """Make ``path`` this job's directory and lock it for the job's life.

    :func:`prepare_job_dir` first: a missing directory is created with mode 0700 (missing parents
    as ``mkdir -p`` does); an existing one must be a directory holding nothing (but a
    ``job.lock`` or a detached run's ``mslaunch.log``) and keeps its mode.  Then ``job.lock`` is
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
    prepare_job_dir(path)
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


def register(job_id: str, job_dir: str, pid: int, argv: List[str]) -> None:
    """Record a job in the registry (and ``job.json`` in its dir).

    Raises:
        JobError: ``job_id`` is not a valid id, or the registry cannot be written.
    """
    path = registry_path(job_id)
    record = {"job_id": job_id, "job_dir": os.path.abspath(job_dir), "pid": pid, "started": time.time(), "argv": argv}
    ensure_registry_dir()
    write_json(os.path.join(job_dir, JOB_FILE), dict(record, state="running"))
    write_json(path, record)


# --- reading jobs back ---------------------------------------------------------------------------

@dataclass(frozen=True)
class JobInfo:
    """What is known of one job.

    Attributes:
        pid: the supervisor's pid: the lock holder while running, else job.json's.
        running_pid: the lock holder (the pid ``stop`` may signal), or None.
        state: see the module docstring.
        problem: why the job is ``corrupt`` (``file: field: what``), else None.
    """

    job_id: str
    job_dir: str
    pid: Optional[int]
    started: Optional[float]
    state: str
    summary: Optional[Dict[str, Any]]
    plan: Optional[Dict[str, Any]]
    problem: Optional[str] = None
    running_pid: Optional[int] = None

    @property
    def ranks(self) -> Optional[int]:
        if self.plan is not None:
            return int(self.plan["world_size"])
        return None


def pid_alive(pid: Optional[int]) -> bool:
    if not pid or not _is_int(pid) or not 0 < pid <= _MAX_PID:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().split(b") ", 1)[1][:1] != b"Z"
    except (OSError, IndexError):
        return True


def is_job_dir(path: str) -> bool:
    """Whether ``path`` is a directory holding a job (``plan.json``, ``job.json`` or ``summary.json``)."""
    return os.path.isdir(path) and any(os.path.lexists(os.path.join(path, n)) for n in (PLAN_FILE, JOB_FILE, SUMMARY_FILE))


def job_info(job_dir: str, record: Optional[Dict[str, Any]] = None, job_id: Optional[str] = None) -> JobInfo:
    """What is known of the job in ``job_dir`` (state derived as the module docstring says).

    Never raises for a bad job: every problem makes the result ``corrupt`` with a reason.

    Args:
        job_dir: the job directory.
        record: its validated registry entry, if it came from the registry.
        job_id: the id to show when no file names one.
    """
    record = record or {}
    problems: List[str] = []
    files: Dict[str, Optional[Dict[str, Any]]] = {}
    running_pid = None
    if not os.path.exists(job_dir):
        problems.append(f"{job_dir}: the job directory does not exist")
    elif not os.path.isdir(job_dir):
        problems.append(f"{job_dir}: is not a directory")
    else:
        running_pid = lock_holder(job_dir)
        for name in (JOB_FILE, PLAN_FILE, SUMMARY_FILE):
            try:
                files[name] = read_job_file(os.path.join(job_dir, name), name)
            except CorruptJobFile as exc:
                files[name] = None
                problems.append(str(exc))
        if not problems and files.get(JOB_FILE) is None and files.get(PLAN_FILE) is None and files.get(SUMMARY_FILE) is None \
                and running_pid is None:
            problems.append(f"{job_dir}: holds no job files ({PLAN_FILE}, {JOB_FILE}, {SUMMARY_FILE})")
    job_file = files.get(JOB_FILE) or {}
    plan = files.get(PLAN_FILE)
    summary = files.get(SUMMARY_FILE)
    shown_id = record.get("job_id") or job_file.get("job_id") or (plan or {}).get("job_id") or job_id or os.path.basename(job_dir.rstrip("/"))
    for source, other in ((JOB_FILE, job_file.get("job_id")), (PLAN_FILE, (plan or {}).get("job_id"))):
        if other is not None and other != shown_id and not problems:
            problems.append(f"{os.path.join(job_dir, source)}: job_id {other!r} is not the registry's {shown_id!r}")
    started = record.get("started", job_file.get("started"))
    pid = running_pid or job_file.get("pid") or record.get("pid")
    if problems:
        state: str = JobStatus.CORRUPT
    elif running_pid is not None:
        state = JobStatus.RUNNING
    elif summary is not None:
        state = str(summary["status"])
    else:
        state = JobStatus.LOST
    return JobInfo(job_id=shown_id, job_dir=job_dir, pid=pid, started=started, state=state, summary=summary, plan=plan,
                   problem="; ".join(problems) if problems else None, running_pid=running_pid)


def _registry_entry(folder: str, name: str) -> JobInfo:
    """The job a registry file names; a bad entry is a ``corrupt`` job named after its file."""
    path = os.path.join(folder, name)
    stem = name[: -len(".json")]
    try:
        record = read_job_file(path, "registry")
        if record is None:
            raise CorruptJobFile("vanished while reading", path=path)
        if record["job_id"] != stem:
            raise CorruptJobFile(f"names job {record['job_id']!r}, not {stem!r}", path=path, field="job_id")
    except CorruptJobFile as exc:
        return JobInfo(job_id=stem, job_dir="-", pid=None, started=None, state=JobStatus.CORRUPT, summary=None, plan=None, problem=str(exc))
    return job_info(record["job_dir"], record)


def list_jobs() -> List[JobInfo]:
    """Every registered job, newest first; a bad entry is listed as ``corrupt`` and hides nothing else."""
    out: List[JobInfo] = []
    folder = registry_dir()
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        if not os.path.lexists(folder):
            return []
        raise JobError("cannot read the job registry: it is a broken symbolic link; check $MSLAUNCH_HOME", path=folder) from None
    except OSError as exc:
        raise JobError(f"cannot read the job registry: {exc.strerror}; check $MSLAUNCH_HOME", path=folder) from None
    for name in names:
        if not name.endswith(".json") or name.startswith("."):
            continue
        out.append(_registry_entry(folder, name))
    out.sort(key=lambda j: j.started or 0.0, reverse=True)
    return out


def find_job(ref: Optional[str]) -> JobInfo:
    """A job by id, id prefix, or job directory path; None means the newest job.

    Raises:
        JobError: an empty ref, a directory that holds no job, no such job, or an ambiguous prefix.
    """
    if ref is not None and not ref.strip():
        raise JobError("the job must not be empty; give a job id, an id prefix or a job directory", field="JOB")
    if ref and (os.sep in ref or os.path.isdir(ref)):
        if not os.path.exists(ref):
            raise JobError("no such job directory", path=ref)
        if not os.path.isdir(ref):
            raise JobError("is not a directory", path=ref)
        if not is_job_dir(ref):
            raise JobError(f"not a job directory (no {PLAN_FILE}, {JOB_FILE} or {SUMMARY_FILE})", path=ref)
        return job_info(os.path.abspath(ref))
    jobs = list_jobs()
    if not ref:
        if not jobs:
            raise JobError("no jobs yet; start one with 'mslaunch run' or pass --log-dir DIR")
        return jobs[0]
    exact = [j for j in jobs if j.job_id == ref]
    if exact:
        return exact[0]
    matches = [j for j in jobs if j.job_id.startswith(ref)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise JobError(f"no job {ref!r}; 'mslaunch ps' lists jobs, or pass a job directory")
    raise JobError(f"job id prefix {ref!r} is ambiguous: {', '.join(j.job_id for j in matches[:5])}")


def attempt_dir(job_dir: str, attempt: int) -> str:
    """Where attempt ``attempt``'s logs go: the job dir for 0, ``attempt_<k>/`` after restarts."""
    return layout.attempt_dir(job_dir, attempt)


def latest_attempt_dir(job_dir: str) -> str:
    k = 0
    while os.path.isdir(layout.attempt_dir(job_dir, k + 1)):
        k += 1
    return attempt_dir(job_dir, k)
