"""Job directories and the job registry behind ``ps`` / ``status`` / ``stop`` / ``logs``.

Job directory (``--log-dir``, default ``./mslaunch_logs/<job-id>/``): see
:mod:`launcher.planning.job.layout` for its files.  :func:`claim_job_dir` creates it with mode 0700
when it is missing; an existing directory is used only when it is empty and the user's own, and is
made 0700 (one line on stderr says so when its mode changed); one another user owns is refused.
Every file mslaunch writes in it is created 0600 (:mod:`launcher.planning.text.private`): they
hold values of the environment (``plan.json``, ``job.json``'s argv, rank logs).  Besides the plan's files
mslaunch writes there:

* ``job.lock``: the running ``mslaunch run`` holds an exclusive POSIX lock (``lockf``) on it for
  the job's life and removes it after writing ``summary.json`` (a job whose mslaunch was killed
  keeps an unlocked one).  It is how a second run on the same directory is refused, how ``ps`` tells a
  running job from a lost one, and which pid ``stop`` signals (the lock's holder, so a reused pid
  is never signalled, and only when ``job.json`` names it: see :func:`~launcher.jobs.joblock.holder_is_the_job`).
* ``job.json``: ``{"job_id", "pid", "started", "argv", "state": "running"}``, written at start.

Registry: ``$MSLAUNCH_HOME/jobs/<job-id>.json`` (default ``~/.mslaunch``) with
``{"job_id", "job_dir", "pid", "started", "argv"}``: it points at the job dir, which holds the
truth (``summary.json`` once the job ended).  Job ids are checked by :func:`validate_job_id`,
so a registry file never lies outside ``$MSLAUNCH_HOME/jobs``.

Every job file (registry entries, ``job.json``, ``plan.json``, ``summary.json``) is read through
:func:`read_job_file`, which validates it; a bad one makes only its own job ``corrupt``.

The reader lives in :mod:`launcher.jobs.jobfile` and the lock in :mod:`launcher.jobs.joblock`;
this module re-exports their public names, so callers import everything from here.

States (``job_state``): ``running`` (the lock is held), ``succeeded`` / ``failed`` / ``timeout``
/ ``stopped`` (from summary.json), ``lost`` (no lock holder and no summary), ``corrupt`` (a job
file or the registry entry is unreadable or malformed; :attr:`JobInfo.problem` says why).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from launcher.errors import JobError
from launcher.jobs.files import write_atomic

# Re-exported: callers and tests use these names through this module.
from launcher.jobs.jobfile import (
    _MAX_PID,
    CorruptJobFile,
    _is_int,
    ensure_registry_dir,
    read_job_file,
    registry_dir,
    registry_path,
)
from launcher.jobs.joblock import (
    lock_holder,
)
from launcher.planning.job import layout
from launcher.planning.job.kinds import JobStatus

PLAN_FILE = layout.PLAN_FILE
SUMMARY_FILE = layout.SUMMARY_FILE
JOB_FILE = layout.JOB_FILE
LOCK_FILE = layout.LOCK_FILE
#: The detached run's console log (written by ``run --detach`` before the job claims the dir).
DETACH_LOG = layout.DETACH_LOG
#: Where a finished job's files go when a new run reuses its ``--log-dir`` (msrun users re-run with
#: the same ``--log_dir``): one previous job is kept, the one before it is removed.
PREVIOUS_DIR = layout.PREVIOUS_DIR


# --- writing -------------------------------------------------------------------------------------


def write_json(path: str, obj: Any, mode: int = 0o600) -> None:
    """Write ``obj`` as JSON atomically (readers see the old file or the whole new one)."""
    write_atomic(path, json.dumps(obj, indent=2, sort_keys=False) + "\n", mode=mode)


def register(job_id: str, job_dir: str, pid: int, argv: List[str], extra: Optional[Dict[str, Any]] = None) -> None:
    """Record a job in the registry (and ``job.json`` in its dir).

    Args:
        extra: more fields for both records (e.g. ``slurm_job_id`` inside a Slurm allocation).

    Raises:
        JobError: ``job_id`` is not a valid id, or the registry cannot be written.
    """
    path = registry_path(job_id)
    record = {"job_id": job_id, "job_dir": os.path.abspath(job_dir), "pid": pid, "started": time.time(), "argv": argv}
    record.update(extra or {})
    ensure_registry_dir()
    write_json(os.path.join(job_dir, JOB_FILE), dict(record, state="running"))
    write_json(path, record)


def register_submitted(job_id: str, job_dir: str, slurm_job_id: str, argv: List[str]) -> None:
    """Record a job submitted with ``mslaunch sbatch`` (registry entry and ``sbatch.json``; no
    ``job.json``: the run inside the allocation claims the job dir and writes it).

    Raises:
        JobError: ``job_id`` is not a valid id, or the registry cannot be written.
    """
    record = {
        "job_id": job_id,
        "job_dir": os.path.abspath(job_dir),
        "started": time.time(),
        "argv": argv,
        "slurm_job_id": slurm_job_id,
    }
    ensure_registry_dir()
    write_json(os.path.join(job_dir, layout.SBATCH_FILE), record)
    write_json(registry_path(job_id), record)


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
    slurm_job_id: Optional[str] = None

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
    return os.path.isdir(path) and any(
        os.path.lexists(os.path.join(path, n)) for n in (PLAN_FILE, JOB_FILE, SUMMARY_FILE)
    )


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
        submitted = _sbatch_record(job_dir)
        if submitted is not None:
            record = dict(submitted, **record)
        if (
            not problems
            and files.get(JOB_FILE) is None
            and files.get(PLAN_FILE) is None
            and files.get(SUMMARY_FILE) is None
            and running_pid is None
            and submitted is None
        ):
            problems.append(f"{job_dir}: holds no job files ({PLAN_FILE}, {JOB_FILE}, {SUMMARY_FILE})")
    job_file = files.get(JOB_FILE) or {}
    plan = files.get(PLAN_FILE)
    summary = files.get(SUMMARY_FILE)
    shown_id = (
        record.get("job_id")
        or job_file.get("job_id")
        or (plan or {}).get("job_id")
        or job_id
        or os.path.basename(job_dir.rstrip("/"))
    )
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
    elif record.get("slurm_job_id") and files.get(JOB_FILE) is None and files.get(PLAN_FILE) is None:
        state = JobStatus.SUBMITTED
    else:
        state = JobStatus.LOST
    slurm_id = job_file.get("slurm_job_id") or record.get("slurm_job_id")
    return JobInfo(
        job_id=shown_id,
        job_dir=job_dir,
        pid=pid,
        started=started,
        state=state,
        summary=summary,
        plan=plan,
        problem="; ".join(problems) if problems else None,
        running_pid=running_pid,
        slurm_job_id=str(slurm_id) if isinstance(slurm_id, (str, int)) and not isinstance(slurm_id, bool) else None,
    )


def _sbatch_record(job_dir: str) -> Optional[Dict[str, Any]]:
    """``sbatch.json`` of a job submitted with ``mslaunch sbatch`` (validated as a registry
    entry), or None."""
    try:
        return read_job_file(os.path.join(job_dir, layout.SBATCH_FILE), "registry")
    except CorruptJobFile:
        return None


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
        return JobInfo(
            job_id=stem,
            job_dir="-",
            pid=None,
            started=None,
            state=JobStatus.CORRUPT,
            summary=None,
            plan=None,
            problem=str(exc),
        )
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
        raise JobError(
            "cannot read the job registry: it is a broken symbolic link; check $MSLAUNCH_HOME", path=folder
        ) from None
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
    if ref and os.sep not in ref and os.path.isdir(ref):
        _refuse_folder_and_job(ref)
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


def _refuse_folder_and_job(ref: str) -> None:
    """Refuse a bare ``ref`` (no ``/``) that is both a folder here and a job id (or id prefix) of
    the registry, unless both are the same job directory: which one is meant cannot be told.

    Raises:
        JobError: naming the folder and the job, and how to pick either.
    """
    here = os.path.realpath(ref)
    jobs = [j for j in list_jobs() if j.job_id == ref or j.job_id.startswith(ref)]
    others = [j for j in jobs if os.path.realpath(j.job_dir) != here]
    if not others or len(others) < len(jobs):
        return  # no such job, or the folder is that job's directory
    job = next((j for j in others if j.job_id == ref), others[0])
    raise JobError(
        f"{ref!r} is both a folder here ({here}) and job {job.job_id} of the registry (in {job.job_dir}); "
        f"pass ./{ref} for the folder, or {job.job_dir} for the job",
        field="JOB",
    )


def attempt_dir(job_dir: str, attempt: int) -> str:
    """Where attempt ``attempt``'s logs go: the job dir for 0, ``attempt_<k>/`` after restarts."""
    return layout.attempt_dir(job_dir, attempt)


def latest_attempt_dir(job_dir: str) -> str:
    k = 0
    while os.path.isdir(layout.attempt_dir(job_dir, k + 1)):
        k += 1
    return attempt_dir(job_dir, k)
