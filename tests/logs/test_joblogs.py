"""A job's logs are read only inside its job directory (launcher/logs/joblogs.py): ``logs tail``,
``logs ls`` and ``report`` never read a file that ``plan.json`` names outside it, directly or
through a symlink (issue 45)."""

from __future__ import annotations

import json
import os

import pytest

from launcher.logs.joblogs import JobLog, job_logs
from tests.harness.cli import run_cli

SECRET = "SECRET-OUTSIDE-THE-JOB"


@pytest.fixture
def job(tmp_path):
    """A finished job whose plan.json names /etc/passwd (rank 0), a log that is a symlink to a
    file outside (rank 1), a '..' path (rank 2) and a plain log (rank 3); a symlinked
    metrics.jsonl points outside too."""
    secret = tmp_path / "secret.txt"
    secret.write_text(f"{SECRET}\nloss: 1.0\n")
    d = tmp_path / "job"
    d.mkdir()
    ranks = [
        {"rank": 0, "host": "localhost", "log": "/etc/passwd"},
        {"rank": 1, "host": "localhost", "log": str(d / "worker_1.log")},
        {"rank": 2, "host": "localhost", "log": "../secret.txt"},
        {"rank": 3, "host": "localhost", "log": str(d / "worker_3.log")},
    ]
    plan = {"job_id": "evil", "job_dir": str(d), "world_size": 4, "launcher": "local", "method": "dynamic"}
    plan.update(ranks=ranks, scheduler={"log": str(secret)})
    (d / "plan.json").write_text(json.dumps(plan))
    (d / "summary.json").write_text(json.dumps({"status": "succeeded", "exit_code": 0, "job_id": "evil"}))
    os.symlink(str(secret), str(d / "worker_1.log"))
    (d / "worker_3.log").write_text("rank3 fine\n")
    metrics = tmp_path / "metrics-elsewhere.jsonl"  # records a report would count, were it read
    metrics.write_text(json.dumps({"rank": 0, "step": 1, "loss": 9.5, "time": 1.0}) + "\n")
    os.symlink(str(metrics), str(d / "metrics.jsonl"))
    return d


def test_job_logs_leave_out_every_file_outside_the_job_dir(job) -> None:
    outside: list = []
    present, missing = job_logs(str(job), outside=outside)
    assert [log.path for log in present] == [str(job / "worker_3.log")] and missing == []
    assert sorted(log.label for log in outside) == ["rank 0", "rank 1", "rank 2", "scheduler"]
    assert all(isinstance(log, JobLog) for log in outside)


def test_logs_tail_and_ls_never_read_outside_the_job_dir(job) -> None:
    for args in (("logs", "tail", str(job)), ("logs", "tail", "-f", str(job)), ("logs", "ls", str(job))):
        r = run_cli(*args)
        assert r.returncode == 0 and "Traceback" not in r.stderr, (args, r.stderr)
        assert SECRET not in r.stdout and "root:" not in r.stdout, (args, r.stdout)
        assert "/etc/passwd" not in r.stdout and "secret.txt" not in r.stdout, (args, r.stdout)
        notes = [line for line in r.stderr.splitlines() if "outside the job directory" in line]
        assert len(notes) == 1 and notes[0].startswith("mslaunch: skipped rank 0 (/etc/passwd), rank 1 ("), r.stderr
        assert "not read" in notes[0], notes
    assert "[rank 3] rank3 fine" in run_cli("logs", "tail", str(job)).stdout


@pytest.mark.heavy
def test_report_never_reads_outside_the_job_dir(job, tmp_path) -> None:
    out = tmp_path / "report"
    r = run_cli("report", str(job), "-o", str(out))
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    html = (out / "report.html").read_text()
    assert SECRET not in html and "root:" not in html
    assert "metrics: 0 records" in html  # neither the symlinked metrics file nor the logs outside were read
    note = [line for line in r.stderr.splitlines() if "outside the job directory" in line]
    assert len(note) == 1 and "metrics.jsonl" in note[0] and "rank 0 (/etc/passwd)" in note[0], r.stderr
