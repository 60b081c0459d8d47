"""Job files: job ids, the registry's place, and the one validating reader of job files.

Every job file (registry entries, ``job.json``, ``plan.json``, ``summary.json``) is read through
:func:`read_job_file`, which validates it against :data:`SCHEMAS`; a bad one raises
:class:`CorruptJobFile` and makes only its own job ``corrupt``.  Job ids are checked by
:func:`validate_job_id`, so a registry file never lies outside ``$MSLAUNCH_HOME/jobs``.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
from typing import Any, Callable, Dict, List, Optional, Tuple

from launcher.errors import JobError
from launcher.planning.job import layout

PLAN_FILE = layout.PLAN_FILE
SUMMARY_FILE = layout.SUMMARY_FILE
JOB_FILE = layout.JOB_FILE

#: Job files larger than this are reported as corrupt instead of being read.
#: Job files larger than this are reported as corrupt instead of being read.
MAX_JOB_FILE_BYTES = 64 * 1024 * 1024
#: Longest job id accepted.
MAX_JOB_ID_LEN = 128
_JOB_ID_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*\Z")
_MAX_PID = 2**31 - 1


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
        raise JobError(
            f"bad job id {job_id!r}: use letters, digits, '.', '_' and '-', starting with a letter, digit or '_', "
            "without '..'",
            field=field,
        )
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
    return None if _is_int(v) and 0 <= v <= 10**9 else "a whole number >= 0"


def _check_opt_int(v: Any) -> Optional[str]:
    return None if v is None or (_is_int(v) and abs(v) < 2**63) else "a whole number or null"


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
    judged = v.get("cause")
    if judged is not None and not (
        isinstance(judged, dict) and all(isinstance(judged.get(k), str) for k in ("kind", "evidence", "hint"))
    ):
        return "an object whose 'cause' is null or an object of strings 'kind', 'evidence' and 'hint'"
    return None


def _check_argv(v: Any) -> Optional[str]:
    return None if isinstance(v, list) and all(isinstance(x, str) for x in v) else "a list of strings"


_Check = Callable[[Any], Optional[str]]
#: Per kind of job file: field -> (check, required).  Only fields mslaunch reads are checked;
#: others are kept as they are.
SCHEMAS: Dict[str, Dict[str, Tuple[_Check, bool]]] = {
    "registry": {
        "job_id": (_check_job_id, True),
        "job_dir": (_check_abs_path, True),
        "pid": (_check_pid, False),
        "started": (_check_time, False),
        "argv": (_check_argv, False),
    },
    JOB_FILE: {"job_id": (_check_job_id, True), "pid": (_check_pid, False), "started": (_check_time, False)},
    PLAN_FILE: {"job_id": (_check_job_id, True), "world_size": (_check_count, True)},
    SUMMARY_FILE: {
        "status": (_check_status, True),
        "exit_code": (_check_opt_int, False),
        "root_cause": (_check_cause, False),
        "message": (_check_opt_str, False),
        "job_id": (_check_str, False),
    },
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
        kind_name = {list: "array", str: "string", int: "number", float: "number", bool: "boolean"}.get(
            type(obj), "null"
        )
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
            raise CorruptJobFile(
                f"is {st.st_size} bytes, larger than the {MAX_JOB_FILE_BYTES} a job file may be", path=path
            )
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
