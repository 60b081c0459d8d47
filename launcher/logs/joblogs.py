"""Where a job's logs are: as the job recorded them in its ``plan.json``, never by a name pattern.

A job names its logs when it is planned (``--worker_log_name``, msrun's per-node names, the
scheduler's log), and ``plan.json`` keeps every path. Every command that reads a job's logs
(``logs tail`` / ``logs ls``, ``top``, ``status``, the metrics writer) finds them here: the
recorded names, moved into the attempt folder being read (``attempt_<k>/`` keeps the names).
A folder without a ``plan.json`` (a job from before plan.json, or not a job) falls back to the
default names (``worker_<rank>.log``, ``scheduler.log``).
"""

from __future__ import annotations

import glob
import os
import posixpath
import threading
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from launcher.jobs.jobfile import CorruptJobFile, read_job_file
from launcher.planning.job import layout


@dataclass(frozen=True)
class JobLog:
    """One log of a job: its label (``rank 3``, ``scheduler``), path and rank (None: scheduler).

    ``rank`` is the global rank, or the local index where MindSpore assigns ranks (per-node mode).
    """

    label: str
    path: str
    rank: Optional[int]


_cache: Dict[str, Tuple[Tuple[int, int], Optional[List[Tuple[str, str, Optional[int]]]]]] = {}
_cache_lock = threading.Lock()


def job_dir_of(folder: str) -> str:
    """The job directory of a job or attempt folder (``<job>/attempt_<k>`` -> ``<job>``)."""
    folder = folder.rstrip("/") or "/"
    parent = os.path.dirname(folder)
    if layout.parse_attempt_dir(os.path.basename(folder)) is not None and os.path.lexists(
        os.path.join(parent, layout.PLAN_FILE)
    ):
        return parent
    return folder


def recorded_logs(job_dir: str) -> Optional[List[Tuple[str, str, Optional[int]]]]:
    """``(label, path relative to the job dir, rank)`` of every log ``plan.json`` names, ranks
    in order then the scheduler; None when the job has no readable ``plan.json``.

    Read once per change of the file (a plan of 100,000 ranks is read once, not at every sweep).
    """
    path = os.path.join(job_dir, layout.PLAN_FILE)
    try:
        st = os.stat(path)
    except OSError:
        return None
    key = (st.st_mtime_ns, st.st_size)
    with _cache_lock:
        hit = _cache.get(path)
    if hit is not None and hit[0] == key:
        return hit[1]
    try:
        plan = read_job_file(path, layout.PLAN_FILE)
    except CorruptJobFile:
        plan = None
    logs: Optional[List[Tuple[str, str, Optional[int]]]] = None
    if plan is not None:
        base = str(plan.get("job_dir") or job_dir)
        logs = []
        for proc in plan.get("ranks") or []:
            rank = proc.get("rank") if isinstance(proc.get("rank"), int) else proc.get("local_rank")
            if isinstance(proc.get("log"), str) and isinstance(rank, int):
                logs.append((f"rank {rank}", _relative(proc["log"], base), rank))
        sched = plan.get("scheduler")
        if isinstance(sched, dict) and isinstance(sched.get("log"), str):
            logs.append(("scheduler", _relative(sched["log"], base), None))
    with _cache_lock:
        _cache[path] = (key, logs)
    return logs


def _relative(path: str, base: str) -> str:
    """``path`` relative to the job dir ``base`` when it lies inside it, else as it is."""
    rel = posixpath.relpath(path, base) if posixpath.isabs(path) else path
    return path if rel.startswith("..") else rel


def inside(path: str, job_dir: str) -> bool:
    """Whether ``path``, symlinks resolved, lies in ``job_dir`` (its own symlinks resolved too)."""
    root = os.path.realpath(job_dir)
    return os.path.commonpath([root, os.path.realpath(path)]) == root


def job_logs(
    folder: str,
    ranks: Optional[Sequence[int]] = None,
    scheduler: bool = True,
    outside: Optional[List[JobLog]] = None,
) -> Tuple[List[JobLog], List[JobLog]]:
    """A job (or attempt) folder's logs as ``(present, missing)``: ranks ascending, scheduler last.

    Only files inside the job directory are given: a log ``plan.json`` names outside it (an
    absolute path, ``..``), in a folder that resolves outside it, or a symlink pointing outside
    it is left out (and added to ``outside``), so no reader of a job's logs reads another file.

    Args:
        folder: the job dir or one of its attempt dirs.
        ranks: only these ranks (and then no scheduler); None: every rank.
        scheduler: include the scheduler's log.
        outside: if given, the logs left out for lying outside the job directory are appended.
    """
    root = job_dir_of(folder)
    recorded = recorded_logs(root)
    if recorded is None:
        return _confine(_default_named(folder, ranks, scheduler), root, outside), []
    wanted = None if ranks is None else set(ranks)
    chosen = [
        JobLog(label, rel if os.path.isabs(rel) else os.path.join(folder, rel), rank)
        for label, rel, rank in recorded
        if (rank is None and scheduler and wanted is None) or (rank is not None and (wanted is None or rank in wanted))
    ]
    chosen.sort(key=lambda log: (log.rank is None, log.rank or 0))
    listed: Dict[str, Optional[Dict[str, bool]]] = {}  # one listing per folder, not a stat per log
    folder_inside: Dict[str, bool] = {}
    present: List[JobLog] = []
    missing: List[JobLog] = []
    for log in chosen:
        where, name = os.path.split(log.path)
        if where not in folder_inside:
            folder_inside[where] = inside(where, root)
            listed[where] = _listing(where) if folder_inside[where] else None
        names = listed[where]
        if not folder_inside[where] or (names is not None and names.get(name) and not inside(log.path, root)):
            if outside is not None:  # named outside the job dir, or a symlink out of it
                outside.append(log)
            continue
        (present if names is not None and name in names else missing).append(log)
    return present, missing


def _listing(folder: str) -> Optional[Dict[str, bool]]:
    """``folder``'s entries -> whether each is a symlink (from the listing: no stat per entry); None if unreadable."""
    try:
        with os.scandir(folder) as entries:
            return {e.name: e.is_symlink() for e in entries}
    except OSError:
        return None


def _confine(logs: List[JobLog], root: str, outside: Optional[List[JobLog]]) -> List[JobLog]:
    """``logs`` that lie inside the job dir ``root``; the others go to ``outside``."""
    kept = []
    for log in logs:
        if inside(log.path, root):
            kept.append(log)
        elif outside is not None:
            outside.append(log)
    return kept


def outside_note(outside: Sequence[JobLog], job_dir: str, shown: int = 4) -> Optional[str]:
    """One line naming the logs left out for lying outside the job directory (None when none is)."""
    if not outside:
        return None
    names = ", ".join(f"{log.label} ({log.path})" for log in outside[:shown])
    more = f" and {len(outside) - shown} more" if len(outside) > shown else ""
    return f"skipped {names}{more}: outside the job directory {job_dir} (symlinks resolved); not read"


def _default_named(folder: str, ranks: Optional[Sequence[int]], scheduler: bool) -> List[JobLog]:
    out: List[JobLog] = []
    for path in glob.glob(os.path.join(glob.escape(folder), layout.WORKER_LOG_GLOB)):
        rank = layout.parse_worker_log(os.path.basename(path))
        if rank is not None and (ranks is None or rank in ranks):
            out.append(JobLog(f"rank {rank}", path, rank))
    out.sort(key=lambda log: log.rank or 0)
    sched = layout.scheduler_log(folder)
    if scheduler and ranks is None and os.path.exists(sched):
        out.append(JobLog("scheduler", sched, None))
    return out


def missing_note(missing: Sequence[JobLog], shown: int = 4) -> Optional[str]:
    """One line naming the logs the job recorded that are not there (None when none is missing)."""
    if not missing:
        return None
    names = ", ".join(f"{log.label} ({log.path})" for log in missing[:shown])
    more = f" and {len(missing) - shown} more" if len(missing) > shown else ""
    return f"no log yet for {names}{more}"
