"""Commands that read a job's logs find them by the job's own record (plan.json), never by a
name pattern: msrun's ``--worker_log_name`` jobs in ``logs tail``/``logs ls``, ``top``, ``status``
and ``metrics.jsonl``; a recorded log that is not there is named in one line."""

from __future__ import annotations

import json
import os

import pytest

from launcher.logs.follow import job_log_sources
from launcher.logs.joblogs import job_logs, missing_note
from tests.harness.cli import run_process

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
ROOT = os.path.dirname(HERE)
PROG = os.path.join(HERE, "scripts", "metricprog.py")


def cli(tmp_path, *args):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), PIDDIR=str(tmp_path))
    return run_process(*args, env=env, cwd=str(tmp_path), timeout=120)


@pytest.fixture(scope="module")
def named_job(tmp_path_factory):
    """A finished 2-rank job whose worker logs are msrun-named ``train_<rank>.log``."""
    tmp = tmp_path_factory.mktemp("named")
    job = tmp / "job"
    r = cli(
        tmp,
        "run",
        "--np",
        "2",
        "--master-port",
        "auto",
        "--quiet",
        "--log-dir",
        str(job),
        "--worker_log_name",
        "train",
        PROG,
        "3",
        "0.01",
        "--format",
        "mslaunch",
    )
    assert r.returncode == 0, r.stderr
    assert sorted(n for n in os.listdir(job) if n.endswith(".log")) == ["scheduler.log", "train_0.log", "train_1.log"]
    return tmp, job


@pytest.mark.e2e
def test_logs_tail_and_ls_find_worker_log_name_logs(named_job) -> None:
    tmp, job = named_job
    t = cli(tmp, "logs", "tail", "--log-dir", str(job), "-n", "100")
    assert t.returncode == 0 and t.stderr == "", t.stderr
    for rank in (0, 1):
        assert any(line.startswith(f"[rank {rank}] MSLAUNCH_METRIC") for line in t.stdout.splitlines()), t.stdout
    only = cli(tmp, "logs", "tail", "--log-dir", str(job), "--rank", "1", "-n", "100").stdout.splitlines()
    assert only and all(line.startswith("[rank 1] ") for line in only)
    ls = cli(tmp, "logs", "ls", "--log-dir", str(job)).stdout.splitlines()
    assert [line.split()[:2] + line.split()[-1:] for line in ls] == [
        ["rank", "0", str(job / "train_0.log")],
        ["rank", "1", str(job / "train_1.log")],
        ["scheduler", str(os.path.getsize(job / "scheduler.log")), str(job / "scheduler.log")],
    ]


@pytest.mark.e2e
def test_top_status_and_metrics_read_worker_log_name_logs(named_job) -> None:
    tmp, job = named_job
    recs = [json.loads(line) for line in open(job / "metrics.jsonl")]
    assert sorted({(r["rank"], r["global_step"]) for r in recs if r["kind"] == "step"}) == [
        (k, s) for k in (0, 1) for s in (1, 2, 3)
    ]
    snap = json.loads(cli(tmp, "top", "--json", "--log-dir", str(job)).stdout)
    assert [(row["rank"], row["step"]) for row in snap["ranks"]] == [(0, 3), (1, 3)]
    # without metrics.jsonl (a job that ended before it existed) top reads the recorded logs themselves
    os.rename(job / "metrics.jsonl", tmp / "metrics.jsonl.bak")
    try:
        snap = json.loads(cli(tmp, "top", "--json", "--log-dir", str(job)).stdout)
        assert [(row["rank"], row["step"]) for row in snap["ranks"]] == [(0, 3), (1, 3)]
    finally:
        os.rename(tmp / "metrics.jsonl.bak", job / "metrics.jsonl")


@pytest.mark.e2e
def test_a_missing_recorded_log_is_named_in_one_line(named_job, tmp_path) -> None:
    tmp, job = named_job
    copy = tmp_path / "job"
    os.mkdir(copy)
    for name in ("plan.json", "job.json", "summary.json", "train_0.log", "scheduler.log"):
        (copy / name).write_bytes((job / name).read_bytes())
    t = cli(tmp_path, "logs", "tail", "--log-dir", str(copy))
    assert t.returncode == 0
    assert (
        t.stderr == f"mslaunch: no log yet for rank 1 ({copy / 'train_1.log'})\n"
    )  # the recorded name, in the folder read
    assert any(line.startswith("[rank 0] ") for line in t.stdout.splitlines())
    ls = cli(tmp_path, "logs", "ls", "--log-dir", str(copy)).stdout.splitlines()
    assert ls[1].split() == ["rank", "1", "-", str(copy / "train_1.log"), "(no", "log", "yet)"]


@pytest.mark.e2e
def test_attempt_folders_keep_the_recorded_names(named_job, tmp_path) -> None:
    _, job = named_job
    attempt = tmp_path / "attempt_2"
    (tmp_path / "plan.json").write_bytes((job / "plan.json").read_bytes())
    attempt.mkdir()
    (attempt / "train_1.log").write_text("x\n")
    present, missing = job_logs(str(attempt))
    assert [(log.label, log.path) for log in present] == [("rank 1", str(attempt / "train_1.log"))]
    assert [log.label for log in missing] == ["rank 0", "scheduler"]
    assert [s.rank for s in job_log_sources(str(attempt), ranks=[1])] == [1]
    assert (
        missing_note(missing)
        == f"no log yet for rank 0 ({attempt / 'train_0.log'}), scheduler ({attempt / 'scheduler.log'})"
    )


def test_missing_note_stays_one_short_line() -> None:
    from launcher.logs.joblogs import JobLog

    logs = [JobLog(f"rank {i}", f"/j/w_{i}.log", i) for i in range(1000)]
    note = missing_note(logs)
    assert note is not None and "\n" not in note and note.endswith("rank 3 (/j/w_3.log) and 996 more")
    assert missing_note([]) is None
