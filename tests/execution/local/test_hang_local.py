"""Hang detection with real local processes (no MindSpore): ``--hang-timeout``, stack dumps, the
culprit, a collective timeout judged as a hang, and no false hang while lines keep coming.

Every test checks that every pid the job created is gone afterwards.
"""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET

import pytest

from tests.execution.local.test_run_local import assert_all_gone, kill_recorded
from tests.harness.ci import require_tool
from tests.harness.cli import run_cli, run_process
from tests.harness.paths import TESTS

HERE = TESTS
PROG = os.path.join(HERE, "scripts", "hangprog.py")


@pytest.fixture
def hjob(tmp_path):
    piddir = tmp_path / "pids"
    piddir.mkdir()
    env = dict(os.environ, PIDDIR=str(piddir))

    class Job:
        dir = tmp_path / "job"
        pids = piddir

        def run(self, *args, extra=(), timeout=120):
            return run_process(
                "run",
                "--np",
                "2",
                "--master-port",
                "auto",
                "--log-dir",
                str(self.dir),
                "--grace",
                "2",
                "--tee",
                "none",
                *extra,
                PROG,
                *args,
                env=env,
                cwd=str(tmp_path),
                timeout=timeout,
            )

        def summary(self):
            return json.loads((self.dir / "summary.json").read_text())

    yield Job()
    kill_recorded(piddir)


def test_a_stalled_rank_is_hung_with_stacks_and_named(hjob):
    junit = hjob.dir.parent / "junit.xml"
    r = hjob.run(
        "steps",
        "0.3",
        "100",
        "--stall-rank",
        "1",
        "--stall-at",
        "5",
        extra=("--hang-timeout", "4", "--junit", str(junit)),
    )
    assert r.returncode == 125, r.stderr
    s = hjob.summary()
    assert s["status"] == "hung" and s["exit_code"] == 125
    suite = ET.parse(junit).getroot()
    failed = [c.get("name") for c in suite if c.find("failure") is not None]
    assert suite.get("failures") == "1" and failed == ["rank 1"]  # CI sees the culprit as the failure
    hang = s["hang"]
    assert hang["kind"] == "no_progress" and hang["limit_s"] == 4.0 and hang["derived"] == "--hang-timeout 4 s"
    assert hang["culprit"]["rank"] == 1 and "silent first" in hang["culprit"]["evidence"]
    rows = {row["rank"]: row for row in hang["ranks"]}
    assert rows[0]["last_step"] == rows[1]["last_step"] == "epoch 0 step 4"
    assert rows[1]["frame"].startswith("stuck_reading_data (hangprog.py:") and rows[0]["frame"].startswith(
        "wait_for_peers (hangprog.py:"
    )
    stacks = hjob.dir / "stacks"
    for rank in (0, 1):
        files = rows[rank]["stack_files"]
        assert files and all(f.startswith(f"rank{rank}.pid") for f in files)
        text = (stacks / files[0]).read_text()
        assert (
            text.startswith(f"# mslaunch stack dump: rank{rank}, pid ")
            and "tool: py-spy" in text
            and "\nThread " in text
        )
    assert s["root_cause"]["rank"] == 1 and "likely culprit" in s["root_cause"]["reason"]
    assert "likely culprit: rank 1" in s["message"] and "likely culprit" in r.stderr
    events = [json.loads(line)["kind"] for line in (hjob.dir / "events.jsonl").read_text().splitlines()]
    assert "hung" in events
    st = run_cli("status", str(hjob.dir))  # the readers run in this process (tests/harness/cli.py)
    assert st.returncode == 1 and "likely culprit: rank 1: it went silent first" in st.stdout
    assert "rank 1: last epoch 0 step 4, main thread in stuck_reading_data (hangprog.py:" in st.stdout
    top = run_cli("top", str(hjob.dir), env=dict(os.environ, COLUMNS="200"))
    assert "likely culprit: rank 1: it went silent first" in top.stdout, top.stdout + top.stderr
    rep = run_cli("report", str(hjob.dir), "--output", str(hjob.dir.parent / "rep"))
    html = (hjob.dir.parent / "rep" / "report.html").read_text()
    assert (
        rep.returncode == 0
        and "likely culprit: rank 1: it went silent first" in html
        and "stuck_reading_data (hangprog.py:" in html
    )
    assert_all_gone(hjob.pids)


@pytest.mark.cost(16)  # measured in a make test run
def test_lines_every_two_seconds_keep_it_alive_and_quiet_ends_it(hjob):
    r = hjob.run("lines", "2", "5", extra=("--hang-timeout", "5"))
    assert r.returncode == 125, r.stderr
    for rank in (0, 1):  # every line came before the verdict: a line every 2 s did not fire a 5 s limit
        lines = (hjob.dir / f"worker_{rank}.log").read_text().splitlines()
        assert lines == [f"rank{rank}: still compiling, part {i}" for i in range(5)]
    hang = hjob.summary()["hang"]
    assert hang["idle_s"] >= 5.0 and hang["limit_s"] == 5.0  # it fires at idle >= limit; idle_s is rounded to 0.1 s
    assert_all_gone(hjob.pids)


def test_a_collective_timeout_is_a_hang_and_names_the_stuck_rank(hjob):
    r = hjob.run(
        "steps",
        "0.3",
        "100",
        "--stall-rank",
        "1",
        "--stall-at",
        "5",
        "--collective-timeout",
        extra=("--hang-timeout", "off"),
    )
    assert r.returncode == 125, r.stderr
    s = hjob.summary()
    hang = s["hang"]
    assert s["status"] == "hung" and hang["kind"] == "collective_timeout"
    assert hang["timed_out"]["rank"] == 0 and "Ring ReduceScatter wait receiving" in hang["timed_out"]["line"]
    assert hang["culprit"]["rank"] == 1, hang
    rows = {row["rank"]: row for row in hang["ranks"]}
    assert rows[0]["alive"] is False and rows[0]["stack_files"] == []  # it had exited: nothing to dump
    assert rows[1]["frame"].startswith("stuck_reading_data") and rows[1]["in_collective"] is False
    assert s["root_cause"]["rank"] == 1
    assert_all_gone(hjob.pids)


def test_hang_timeout_is_checked_before_anything_starts(hjob):
    r = hjob.run("lines", "1", "1", extra=("--hang-timeout", "soon"))
    assert r.returncode == 2 and "--hang-timeout 'soon'" in r.stderr and "Traceback" not in r.stderr
    assert not hjob.dir.exists()


@pytest.mark.mpi
def test_local_mpirun_ranks_are_dumped_and_named_by_rank_id(hjob):
    require_tool("mpirun", package="openmpi-bin")
    r = hjob.run(
        "steps",
        "0.3",
        "100",
        "--stall-rank",
        "1",
        "--stall-at",
        "5",
        extra=("--launcher", "mpirun", "--hang-timeout", "4"),
    )
    assert r.returncode == 125, r.stderr
    hang = hjob.summary()["hang"]
    rows = {row["rank"]: row for row in hang["ranks"]}
    assert rows[1]["frame"].startswith("stuck_reading_data (hangprog.py:") and rows[0]["frame"].startswith(
        "wait_for_peers (hangprog.py:"
    )
    assert all(rows[r]["stack_files"][0].startswith(f"rank{r}.pid") for r in (0, 1))
    assert hang["culprit"]["rank"] == 1
    assert_all_gone(hjob.pids)


def test_first_step_timeout_ends_a_job_that_never_logs_a_step(hjob):
    r = hjob.run("lines", "0.5", "3", extra=("--hang-timeout", "off", "--first-step-timeout", "3"))
    assert r.returncode == 125, r.stderr
    hang = hjob.summary()["hang"]
    assert hang["derived"] == "--first-step-timeout 3 s: no rank logged a step" and hang["limit_s"] == 3.0
    assert_all_gone(hjob.pids)


def test_a_stopped_rank_is_seen_at_once_named_ended_and_the_restart_finishes(hjob):
    """A rank stopped by a signal (SIGSTOP: no exit, no output, the most common face of a real
    hang) ends the attempt after --stopped-timeout, long before --hang-timeout; it is the culprit;
    teardown's SIGTERM reaches it (SIGCONT follows), and the restart runs the job to its end."""
    r = hjob.run(
        "steps",
        "0.1",
        "15",
        "--stop-rank",
        "1",
        "--stop-at",
        "4",
        extra=("--hang-timeout", "120", "--stopped-timeout", "2", "--max-restarts", "1"),
    )
    assert r.returncode == 0, r.stderr
    s = hjob.summary()
    first, second = s["attempt_results"]
    assert (first["status"], second["status"]) == ("hung", "succeeded")
    hang = first["hang"]
    assert hang["kind"] == "stopped" and hang["limit_s"] == 2.0 and hang["derived"] == "--stopped-timeout 2 s"
    assert hang["culprit"]["rank"] == 1 and "stopped (state T" in hang["culprit"]["evidence"], hang
    rows = {row["rank"]: row for row in hang["ranks"]}
    assert rows[1]["stopped_s"] >= 2.0 and "stopped_s" not in rows[0], rows
    ended = {p["name"]: p for p in first["processes"] if p["name"].startswith("rank")}
    assert ended["rank 1"]["signal"] == "SIGTERM", ended  # SIGTERM acted at once: not held until SIGKILL
    assert "likely culprit: rank 1: its process is stopped" in r.stderr
    cause = first["root_cause"]
    assert cause["rank"] == 1 and "process was stopped by a signal" in cause["cause"]["evidence"], cause
    assert "--stopped-timeout off" in cause["cause"]["hint"]
    lines = (hjob.dir / "attempt_1" / "worker_1.log").read_text().splitlines()
    assert lines[-1].startswith("epoch: 0, step: 14,")
    assert_all_gone(hjob.pids)
