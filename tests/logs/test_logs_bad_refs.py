"""`logs tail` / `logs ls` with a job reference that names no job: one-line error, non-zero exit,
nothing on stdout (never a silent exit 0)."""

from __future__ import annotations

import os
import sys

from tests.harness.cli import run_cli, run_process

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # tests/
PROG = os.path.join(HERE, "scripts", "rankprog.py")


def cli(home, *args, cwd=None):
    """``mslaunch ARGS`` with ``home`` as MSLAUNCH_HOME, in this process (``logs`` only reads)."""
    return run_cli(*args, env=dict(os.environ, MSLAUNCH_HOME=str(home)), cwd=cwd)


def run_job(home, *args, cwd=None):
    env = dict(os.environ, MSLAUNCH_HOME=str(home))
    return run_process("run", *args, env=env, cwd=cwd, timeout=60)


def test_logs_tail_and_ls_reject_what_is_not_a_job(tmp_path):
    home = tmp_path / "home"
    empty = tmp_path / "empty"
    empty.mkdir()
    a_file = tmp_path / "a-file"
    a_file.write_text("x\n")
    other = tmp_path / "other"  # a directory with files, none of them a job's
    other.mkdir()
    (other / "worker_0.log").write_text("not ours\n")

    # no job registered yet
    for cmd in ("tail", "ls"):
        r = cli(home, "logs", cmd, cwd=str(tmp_path))
        assert (
            r.returncode == 2
            and r.stdout == ""
            and r.stderr == "mslaunch: error: no jobs yet; start one with 'mslaunch run' or pass --log-dir DIR\n"
        )

    # a real finished job, so that "newest job" exists and bad references cannot fall back to it
    job = tmp_path / "job"
    run = run_job(
        home,
        "--np",
        "1",
        "--master-port",
        "auto",
        "--quiet",
        "--log-dir",
        str(job),
        "--no-python",
        sys.executable,
        PROG,
        "ok",
        "0.05",
        cwd=str(tmp_path),
    )
    assert run.returncode == 0, run.stderr
    assert "[rank 0] rank0 done" in cli(home, "logs", "tail", cwd=str(tmp_path)).stdout

    cases = [
        (["/etc"], "/etc: not a job directory"),
        ([str(empty)], f"{empty}: not a job directory"),
        (["--log-dir", str(empty)], f"{empty}: not a job directory"),
        (["--log-dir", "empty"], "./empty: not a job directory"),
        ([str(other)], f"{other}: not a job directory"),
        ([""], "JOB: the job must not be empty"),
        (["   "], "JOB: the job must not be empty"),
        (["--log-dir", ""], "--log-dir: --log-dir must not be empty"),
        (["--log-dir", str(tmp_path / "missing")], f"{tmp_path / 'missing'}: no such job directory"),
        (["--log-dir", str(a_file)], f"{a_file}: is not a directory"),
        ([str(a_file)], f"{a_file}: is not a directory"),
        ([str(tmp_path / "missing")], f"{tmp_path / 'missing'}: no such job directory"),
        (["no-such-job"], "no job 'no-such-job'"),
        (["x", "--log-dir", str(job)], "--log-dir: give a job id or --log-dir, not both"),
    ]
    for cmd in ("tail", "ls"):
        for args, message in cases:
            r = cli(home, "logs", cmd, *args, cwd=str(tmp_path))
            assert r.returncode == 2, (cmd, args, r.returncode, r.stderr)
            assert r.stdout == "", (cmd, args, r.stdout)
            assert r.stderr.startswith("mslaunch: error: ") and len(r.stderr.splitlines()) == 1, (cmd, args, r.stderr)
            assert message in r.stderr, (cmd, args, r.stderr)
    for ranks, message in (
        ("-1", "no rank -1"),
        ("1", "no rank 1; the job has ranks 0..0"),
        ("0,7", "no rank 7"),
        ("x", "--rank takes rank numbers"),
        (",", "--rank takes rank numbers"),
        ("", "--rank takes rank numbers"),
        ("99999999999999999999", "no rank 9999"),
    ):
        r = cli(home, "logs", "tail", str(job), "--rank", ranks, cwd=str(tmp_path))
        assert (r.returncode, r.stdout) == (2, ""), (ranks, r.stderr)
        assert (
            r.stderr.startswith("mslaunch: error: --rank: ") and message in r.stderr and len(r.stderr.splitlines()) == 1
        ), (ranks, r.stderr)
    for n in ("-5", "-1"):
        r = cli(home, "logs", "tail", "-n", n, str(job), cwd=str(tmp_path))
        assert (r.returncode, r.stdout, r.stderr) == (
            2,
            "",
            f"mslaunch: error: --lines: -n takes a number of lines >= 0, got {n}\n",
        )
