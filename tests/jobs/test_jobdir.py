"""Which job a reference names (launcher/jobs/jobdir.py, find_job): a bare id that is also a
folder here is refused, not guessed (issue 45)."""

from __future__ import annotations

import json
import os

from launcher.jobs import jobdir
from tests.harness.cli import run_cli


def _finished_job(d, job_id: str) -> None:
    d.mkdir(parents=True)
    (d / "plan.json").write_text(json.dumps({"job_id": job_id, "world_size": 1}))
    (d / "summary.json").write_text(json.dumps({"status": "succeeded", "exit_code": 0, "job_id": job_id}))


def test_a_bare_id_that_is_also_a_folder_here_is_refused_naming_both(tmp_path) -> None:
    registered = tmp_path / "elsewhere" / "abc"
    _finished_job(registered, "abc")
    jobdir.register("abc", str(registered), os.getpid(), ["mslaunch", "run"])
    work = tmp_path / "work"
    _finished_job(work / "abc", "a-folder-job")  # a folder named like the job id, holding another job
    _finished_job(work / "ab", "a-folder-job-2")  # ... and one named like a prefix of it
    for args in (("status", "abc"), ("logs", "tail", "abc"), ("logs", "ls", "abc"), ("stop", "abc"), ("status", "ab")):
        r = run_cli(*args, cwd=str(work))
        err = r.stderr.strip()
        assert r.returncode == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, (args, r.stderr)
        assert err.startswith(f"mslaunch: error: JOB: {args[-1]!r} is both a folder here ({work / args[-1]})"), err
        assert f"job abc of the registry (in {registered})" in err and f"pass ./{args[-1]} for the folder" in err, err
    folder = run_cli("status", "./abc", cwd=str(work))
    assert folder.returncode == 0 and folder.stdout.startswith("job a-folder-job: succeeded"), folder.stdout
    job = run_cli("status", str(registered), cwd=str(work))
    assert job.returncode == 0 and job.stdout.startswith("job abc: succeeded"), job.stdout


def test_a_folder_that_is_the_jobs_own_directory_is_not_ambiguous(tmp_path) -> None:
    d = tmp_path / "abc"
    _finished_job(d, "abc")
    jobdir.register("abc", str(d), os.getpid(), ["mslaunch", "run"])
    r = run_cli("status", "abc", cwd=str(tmp_path))
    assert r.returncode == 0 and r.stdout.startswith("job abc: succeeded"), r.stderr
