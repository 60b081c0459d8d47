"""The job directory layout: the one place that names every file and folder of a job (pure).

Planning, execution, jobs, logs, the CLI and the rank wrapper (``templates/mslaunch-rank.sh``,
which is handed :func:`worker_log_template` instead of spelling a name) all take their paths
from here, and the regexes that read names back (:func:`parse_worker_log`,
:func:`parse_attempt_dir`) sit next to the functions that make them, so the two cannot drift.

Job directory (``--log-dir``, default ``./mslaunch_logs/<job-id>/``)::

    <job_dir>/
      plan.json            the plan (``mslaunch plan --json`` shape)
      job.json             the running job: job id, supervisor pid, start time, argv
      job.lock             held (POSIX lock) by the supervising mslaunch while the job runs
      summary.json         written when the job ends (status, per-process exits, root cause)
      events.jsonl         the supervisor's events, one JSON object a line
      metrics.jsonl        training metrics parsed from the ranks' logs
      mslaunch.log         a detached run's own output
      stopping             written before a teardown's SIGTERM: why the ranks are stopped (in each
                           attempt's folder; ``MSLAUNCH_STOPPING_FILE``, docs/long-jobs.md)
      rank_table.json      artefact: ranktable method (unless --rank_table_file is given)
      hostfile             artefact: mpirun launcher with --hostfile
      ssh_config           artefact: mpirun launcher, per-host ssh settings
      scheduler.log        dynamic method: the scheduler's output
      mpirun.log           mpirun launcher: mpirun's own output
      worker_<rank>.log    one per rank (msrun's names; ``--worker_log_name NAME``: NAME_<rank>.log)
      device<rank>/        ranktable method: the rank's cwd, holding env<rank>.log
      attempt_<k>/         restart attempt k (k >= 1): the same log names and rank cwds
      compile_cache/       MindSpore's compile cache of the job's ranks (``MS_COMPILER_CACHE_PATH``;
                           MindSpore writes ``rank_<id>/`` in it), shared by its attempts
      .previous/           the job that used this --log-dir before (msrun's --log_dir reuse)

Paths are built with :mod:`posixpath`: a plan names paths on every host of the job.
"""

from __future__ import annotations

import posixpath
import re
from typing import Callable, Optional

__all__ = [
    "ATTEMPT_DIR_GLOB",
    "COMPILE_CACHE_DIR",
    "DEFAULT_WORKER_LOG_PREFIX",
    "DETACH_LOG",
    "EVENTS_FILE",
    "HOSTFILE_FILE",
    "JOB_FILE",
    "LOCK_FILE",
    "METRICS_FILE",
    "MPIRUN_LOG",
    "PLAN_FILE",
    "PREVIOUS_DIR",
    "RANK_PLACEHOLDER",
    "RANK_TABLE_FILE",
    "SCHEDULER_LOG",
    "SSH_CONFIG_FILE",
    "STOPPING_FILE",
    "SUMMARY_FILE",
    "WORKER_LOG_GLOB",
    "artefact_path",
    "attempt_dir",
    "compile_cache_dir",
    "attempt_dir_name",
    "env_dump_path",
    "fill_rank",
    "job_file",
    "parse_attempt_dir",
    "stopping_file",
    "parse_worker_log",
    "rank_cwd",
    "rank_cwd_prefix",
    "scheduler_log",
    "worker_log",
    "worker_log_name",
    "worker_log_template",
]

PLAN_FILE = "plan.json"
JOB_FILE = "job.json"
LOCK_FILE = "job.lock"
SUMMARY_FILE = "summary.json"
EVENTS_FILE = "events.jsonl"
METRICS_FILE = "metrics.jsonl"
#: A detached run's own output.
DETACH_LOG = "mslaunch.log"
#: Why the ranks of an attempt are stopped, written before its teardown's SIGTERM (an attempt dir's file).
STOPPING_FILE = "stopping"
#: Where a reused ``--log-dir``'s previous job is moved.
PREVIOUS_DIR = ".previous"

RANK_TABLE_FILE = "rank_table.json"
HOSTFILE_FILE = "hostfile"
SSH_CONFIG_FILE = "ssh_config"

SCHEDULER_LOG = "scheduler.log"
#: MindSpore's compile cache of the job (see :func:`compile_cache_dir`).
COMPILE_CACHE_DIR = "compile_cache"
#: mpirun's own output (the mpirun launcher), in the job dir or an attempt dir.
MPIRUN_LOG = "mpirun.log"
#: Prefix of worker logs unless ``--worker_log_name`` gives another (msrun's default).
DEFAULT_WORKER_LOG_PREFIX = "worker"
#: Stands for the rank in :func:`worker_log_template` (the last occurrence is the one replaced).
RANK_PLACEHOLDER = "{rank}"

#: Glob of the default-named worker logs of one folder.
WORKER_LOG_GLOB = f"{DEFAULT_WORKER_LOG_PREFIX}_*.log"
#: Glob of the attempt folders of a job dir.
ATTEMPT_DIR_GLOB = "attempt_*"
#: ``mslaunch sbatch``: the batch script, its record (Slurm job id) and Slurm's output for it.
SBATCH_SCRIPT = "sbatch.sh"
SBATCH_FILE = "sbatch.json"
#: ``mslaunch sbatch``: the secrets' values (0600), read by the run at run time, never in the script.
SBATCH_SECRETS = "secrets.json"
SBATCH_OUTPUT = "slurm.out"

_WORKER_LOG_RE = re.compile(re.escape(DEFAULT_WORKER_LOG_PREFIX) + r"_([0-9]+)\.log\Z")
_ATTEMPT_DIR_RE = re.compile(r"attempt_([0-9]+)\Z")
_RANK_CWD_NAME = "device"


def job_file(job_dir: str, name: str) -> str:
    """``<job_dir>/<name>`` for one of the job files above (``PLAN_FILE``, ``SUMMARY_FILE``, ...)."""
    return posixpath.join(job_dir, name)


def artefact_path(job_dir: str, name: str) -> str:
    """Where an artefact named ``name`` (relative to the job dir) is written."""
    return posixpath.join(job_dir, name)


def compile_cache_dir(job_dir: str) -> str:
    """``<job_dir>/compile_cache``: where the ranks' compiled graphs are kept for the job's restarts."""
    return posixpath.join(job_dir, COMPILE_CACHE_DIR)


def stopping_file(attempt_dir: str) -> str:
    """``<attempt dir>/stopping``: why its ranks are stopped (:data:`STOPPING_FILE`)."""
    return posixpath.join(attempt_dir, STOPPING_FILE)


def attempt_dir_name(attempt: int) -> str:
    """``attempt_<k>``: the folder of restart attempt ``attempt`` (``>= 1``)."""
    return f"attempt_{attempt}"


def attempt_dir(job_dir: str, attempt: int) -> str:
    """Where attempt ``attempt``'s logs go: the job dir for 0, ``<job_dir>/attempt_<k>`` after restarts."""
    return job_dir if attempt == 0 else posixpath.join(job_dir, attempt_dir_name(attempt))


def parse_attempt_dir(name: str) -> Optional[int]:
    """The attempt number of a folder named by :func:`attempt_dir_name`, else None."""
    match = _ATTEMPT_DIR_RE.match(name)
    return int(match.group(1)) if match else None


def worker_log_name(index: int, prefix: Optional[str] = None) -> str:
    """``<prefix>_<index>.log`` (``worker_3.log``); ``index`` is the rank, or the local index
    where MindSpore assigns the ranks."""
    return fill_rank(worker_log_template(prefix), index)


def fill_rank(template: str, rank: int) -> str:
    """``template`` with its last :data:`RANK_PLACEHOLDER` replaced by ``rank``: what the rank
    wrapper does with the name it is given (``${NAME%"{rank}"*}$rank${NAME##*"{rank}"}``)."""
    head, sep, tail = template.rpartition(RANK_PLACEHOLDER)
    return head + str(rank) + tail if sep else template


def worker_log_template(prefix: Optional[str] = None) -> str:
    """The worker log name with :data:`RANK_PLACEHOLDER` for the rank (``worker_{rank}.log``):
    what the rank wrapper is given, so it never spells a log name itself."""
    return f"{prefix if prefix is not None else DEFAULT_WORKER_LOG_PREFIX}_{RANK_PLACEHOLDER}.log"


def parse_worker_log(name: str) -> Optional[int]:
    """The rank of a default-named worker log (``worker_3.log`` -> 3), else None."""
    match = _WORKER_LOG_RE.match(name)
    return int(match.group(1)) if match else None


def worker_log(folder: str, index: int, prefix: Optional[str] = None) -> str:
    """A worker's log path in ``folder`` (the job dir or an attempt dir)."""
    return posixpath.join(folder, worker_log_name(index, prefix))


def worker_log_filler(folder: str, prefix: Optional[str] = None) -> Callable[[int], str]:
    """``lambda index: worker_log(folder, index, prefix)``, with the path's fixed parts joined
    once (plans of 100,000 ranks)."""
    head, _, tail = posixpath.join(folder, worker_log_template(prefix)).rpartition(RANK_PLACEHOLDER)
    return lambda index: f"{head}{index}{tail}"


def scheduler_log(folder: str) -> str:
    """The scheduler's log path in ``folder`` (the job dir or an attempt dir)."""
    return posixpath.join(folder, SCHEDULER_LOG)


def rank_cwd_prefix(job_dir: str) -> str:
    """``<job_dir>/device``: a ranktable rank runs in ``<prefix><rank>/`` (the wrapper is given this)."""
    return posixpath.join(job_dir, _RANK_CWD_NAME)


def rank_cwd(job_dir: str, rank: int) -> str:
    """The working directory of ranktable rank ``rank``: ``<job_dir>/device<rank>`` (as seed 001's run.sh)."""
    return rank_cwd_prefix(job_dir) + str(rank)


def env_dump_path(cwd: str, rank: int) -> str:
    """Where a ranktable rank's full environment is dumped: ``<cwd>/env<rank>.log`` (seed 001's ``env > env$i.log``)."""
    return posixpath.join(cwd, f"env{rank}.log")
