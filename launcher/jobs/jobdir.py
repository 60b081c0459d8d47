"""Job directories and the job registry behind ``ps`` / ``status`` / ``stop`` / ``logs``.

Job directory (``--log-dir``, default ``./mslaunch_logs/<job-id>/``, mode 0700): see
:mod:`launcher.planning.plan` for its files.  mslaunch also writes ``job.json`` there while the
job runs: ``{"job_id", "pid", "started", "argv", "state": "running"}``.

Registry: ``$MSLAUNCH_HOME/jobs/<job-id>.json`` (default ``~/.mslaunch``) with
``{"job_id", "job_dir", "pid", "started", "argv"}``: it points at the job dir, which holds the
truth (``summary.json`` once the job ended).

States (``job_state``): ``running`` (supervisor pid alive, no summary), ``succeeded`` /
``failed`` / ``timeout`` / ``stopped`` (from summary.json), ``lost`` (supervisor gone without a
summary).
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from launcher.errors import JobError, MsLaunchError
from launcher.jobs.files import write_atomic

PLAN_FILE = "plan.json"
SUMMARY_FILE = "summary.json"
JOB_FILE = "job.json"


def mslaunch_home(environ: Optional[Dict[str, str]] = None) -> str:
    env = os.environ if environ is None else environ
    if env.get("MSLAUNCH_HOME"):
        return env["MSLAUNCH_HOME"]
    return os.path.join(os.path.expanduser("~"), ".mslaunch")


def registry_dir() -> str:
    return os.path.join(mslaunch_home(), "jobs")


def create_job_dir(path: str) -> None:
    """Create the job dir with mode 0700 (its parents as usual).

    Raises:
        MsLaunchError: it cannot be created, or holds a previous job (plan.json exists).
    """
    if os.path.exists(os.path.join(path, PLAN_FILE)):
        raise MsLaunchError("already holds a job (plan.json exists); choose a new --log-dir or remove it", path=path)
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        os.chmod(path, 0o700)
    except OSError as exc:
        raise MsLaunchError(f"cannot create job directory: {exc.strerror}", path=path) from None


def write_json(path: str, obj: Any, mode: int = 0o600) -> None:
    write_atomic(path, json.dumps(obj, indent=2, sort_keys=False) + "\n", mode=mode)


def read_json(path: str) -> Any:
    try:
        with open(path, "r", encoding="utf-8") as fh:
            return json.load(fh)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise JobError(f"cannot read: {exc}", path=path) from None


def register(job_id: str, job_dir: str, pid: int, argv: List[str]) -> None:
    """Record a job in the registry (and ``job.json`` in its dir)."""
    record = {"job_id": job_id, "job_dir": job_dir, "pid": pid, "started": time.time(), "argv": argv}
    os.makedirs(registry_dir(), mode=0o700, exist_ok=True)
    write_json(os.path.join(registry_dir(), f"{job_id}.json"), record)
    write_json(os.path.join(job_dir, JOB_FILE), dict(record, state="running"))


@dataclass(frozen=True)
class JobInfo:
    job_id: str
    job_dir: str
    pid: Optional[int]
    started: Optional[float]
    state: str
    summary: Optional[Dict[str, Any]]
    plan: Optional[Dict[str, Any]]

    @property
    def ranks(self) -> Optional[int]:
        if self.plan is not None:
            return int(self.plan.get("world_size", 0))
        return None


def pid_alive(pid: Optional[int]) -> bool:
    if not pid:
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


def job_info(job_dir: str, job_id: Optional[str] = None, pid: Optional[int] = None, started: Optional[float] = None) -> JobInfo:
    """What is known of the job in ``job_dir`` (state derived as the module docstring says)."""
    summary = read_json(os.path.join(job_dir, SUMMARY_FILE))
    plan = read_json(os.path.join(job_dir, PLAN_FILE))
    record = read_json(os.path.join(job_dir, JOB_FILE)) or {}
    pid = pid if pid is not None else record.get("pid")
    started = started if started is not None else record.get("started")
    job_id = job_id or record.get("job_id") or (plan or {}).get("job_id") or os.path.basename(job_dir.rstrip("/"))
    if summary is not None:
        state = str(summary.get("status", "unknown"))
    elif pid_alive(pid):
        state = "running"
    else:
        state = "lost"
    return JobInfo(job_id=job_id, job_dir=job_dir, pid=pid, started=started, state=state, summary=summary, plan=plan)


def list_jobs() -> List[JobInfo]:
    """Every registered job, newest first (entries whose dir vanished are skipped)."""
    out: List[JobInfo] = []
    folder = registry_dir()
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    for name in names:
        if not name.endswith(".json"):
            continue
        try:
            record = read_json(os.path.join(folder, name))
        except JobError:
            continue
        if not isinstance(record, dict) or not os.path.isdir(record.get("job_dir", "")):
            continue
        out.append(job_info(record["job_dir"], record.get("job_id"), record.get("pid"), record.get("started")))
    out.sort(key=lambda j: j.started or 0.0, reverse=True)
    return out


def find_job(ref: Optional[str]) -> JobInfo:
    """A job by id, id prefix, or job directory path; None/"" means the newest job.

    Raises:
        JobError: no such job, or an ambiguous prefix.
    """
    if ref and os.path.isdir(ref):
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
    return job_dir if attempt == 0 else os.path.join(job_dir, f"attempt_{attempt}")


def latest_attempt_dir(job_dir: str) -> str:
    k = 0
    while os.path.isdir(os.path.join(job_dir, f"attempt_{k + 1}")):
        k += 1
    return attempt_dir(job_dir, k)
