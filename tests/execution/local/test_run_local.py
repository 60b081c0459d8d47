"""`mslaunch run` on this machine with real processes: success, faults, teardown, job files.

Every test checks that every pid the job created (ranks, the scheduler, and a child each of
them starts) is gone afterwards.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

import psutil
import pytest

from tests.harness.ci import require_tool
from tests.harness.cli import mslaunch_argv, run_cli, run_process
from tests.harness.paths import TESTS

HERE = TESTS
PROG = os.path.join(HERE, "scripts", "rankprog.py")


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def job_pids(piddir) -> list:
    pids = []
    for name in os.listdir(piddir):
        if name.endswith(".pids"):
            pids += [int(x) for x in open(os.path.join(piddir, name)).read().split()]
    return pids


def kill_recorded(piddir) -> None:
    """Safety net for a failing test: SIGKILL what a job recorded in ``piddir``, by pid only."""
    for pid in job_pids(piddir) if piddir.exists() else []:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def assert_all_gone(piddir, within: float = 0.0):
    pids = job_pids(piddir)
    assert pids, "the job recorded its pids"
    deadline = time.monotonic() + within
    while True:
        left = [p for p in pids if alive(p)]
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    assert left == [], f"processes left running: {left}"


@pytest.fixture
def job(tmp_path):
    piddir = tmp_path / "pids"
    piddir.mkdir()
    env = dict(os.environ, PIDDIR=str(piddir))
    env.pop("PYTHONUNBUFFERED", None)

    class Job:
        dir = tmp_path / "job"
        pids = piddir
        environ = env

        def args(self, *args, np=2, extra=()):
            """The CLI's arguments of ``mslaunch run`` of this job."""
            return [
                "run",
                "--np",
                str(np),
                "--master-port",
                "auto",
                "--log-dir",
                str(self.dir),
                "--grace",
                "2",
                *extra,
                PROG,
                *args,
            ]

        def run(self, *args, np=2, extra=(), timeout=60):
            return run_process(*self.args(*args, np=np, extra=extra), env=env, cwd=str(tmp_path), timeout=timeout)

        def popen(self, *args, np=2, extra=()):
            return subprocess.Popen(
                mslaunch_argv(*self.args(*args, np=np, extra=extra)),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
                cwd=str(tmp_path),
            )

        def summary(self):
            return json.loads((self.dir / "summary.json").read_text())

        def wait_started(self, n, timeout=20):
            deadline = time.monotonic() + timeout
            while len([f for f in os.listdir(piddir) if f.endswith(".pids")]) < n:
                assert time.monotonic() < deadline, "ranks did not start"
                time.sleep(0.05)

    yield Job()
    kill_recorded(piddir)


def test_success_writes_job_dir(job):
    r = job.run("ok", "0.3")
    assert r.returncode == 0, r.stderr
    s = job.summary()
    assert s["status"] == "succeeded" and s["exit_code"] == 0 and s["root_cause"] is None
    assert [p["name"] for p in s["processes"]] == ["scheduler", "rank 0", "rank 1"]
    assert [p["exit_code"] for p in s["processes"][1:]] == [0, 0]
    files = sorted(os.listdir(job.dir))
    assert files == [
        "events.jsonl",
        "job.json",
        "plan.json",
        "scheduler.log",
        "summary.json",
        "worker_0.log",
        "worker_1.log",
    ]
    assert oct(os.stat(job.dir).st_mode & 0o777) == "0o700"
    assert (job.dir / "worker_1.log").read_text().splitlines()[-1] == "rank1 done"
    plan = json.loads((job.dir / "plan.json").read_text())
    assert plan["ranks"][1]["env"]["RANK_ID"] == "1" and plan["scheduler"]["env"]["MS_ROLE"] == "MS_SCHED"
    # console: rank 0's lines prefixed; the summary table on stderr
    assert "[rank 0] rank0 done" in r.stdout.splitlines()
    assert "succeeded" in r.stderr
    assert_all_gone(job.pids)


def test_a_checkpoint_a_rank_could_not_write_is_an_event_and_the_job_goes_on(job):
    r = job.run("ckptfail", "0.3", "1")
    assert r.returncode == 0, r.stderr
    events = [json.loads(line) for line in (job.dir / "events.jsonl").read_text().splitlines()]
    failed = [(e["rank"], e["attempt"], e["why"]) for e in events if e["kind"] == "ckpt_failed"]
    assert failed == [(1, 0, "[Errno 28] No space left on device")], events
    assert [e["kind"] for e in events].index("ckpt_failed") < [e["kind"] for e in events].index("job_end")
    line = "mslaunch: rank 1: a checkpoint was not written ([Errno 28] No space left on device); the job trains on"
    assert line in r.stderr.splitlines(), r.stderr
    assert job.summary()["status"] == "succeeded" and len(job.summary()["attempt_results"]) == 1
    assert_all_gone(job.pids)


def test_rank_exit_code_is_the_jobs(job):
    r = job.run("fail", "0.5", "1", "3", np=3)
    assert r.returncode == 3, r.stderr
    s = job.summary()
    cause = s["root_cause"]
    assert (s["status"], cause["name"], cause["rank"], cause["host"], cause["exit_code"], cause["signal"]) == (
        "failed",
        "rank 1",
        1,
        "localhost",
        3,
        None,
    )
    assert cause["tail"][-1] == "RuntimeError: rank1 fails with 3"
    assert cause["log"] == str(job.dir / "worker_1.log")
    others = {p["name"]: p for p in s["processes"]}
    assert others["rank 0"]["torn_down"] and others["rank 2"]["torn_down"]
    # default console mode shows rank 1's error line, and the failure panel names it
    assert "[rank 1] RuntimeError: rank1 fails with 3" in r.stdout.splitlines()
    assert "root cause: rank 1 on localhost: exit code 3" in r.stderr
    assert_all_gone(job.pids)


def test_rank_killed_by_signal(job):
    r = job.run("sigkill", "0.3", "0")
    assert r.returncode == 137, r.stderr
    cause = job.summary()["root_cause"]
    assert (cause["rank"], cause["exit_code"], cause["signal"], cause["reason"]) == (
        0,
        137,
        "SIGKILL",
        "killed by SIGKILL",
    )
    assert_all_gone(job.pids)


def test_sigint_to_mslaunch_tears_down(job):
    p = job.popen("hang")
    job.wait_started(3)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 130, err
    assert job.summary()["status"] == "stopped"
    assert_all_gone(job.pids)


def test_mslaunch_sigkilled_leaves_nothing(job):
    p = job.popen("hang")
    job.wait_started(3)
    p.kill()
    p.wait(timeout=10)
    assert_all_gone(job.pids, within=2.0)


def test_timeout_tears_down(job):
    r = job.run("hang", extra=("--timeout", "1.5"))
    assert r.returncode == 124, r.stderr
    s = job.summary()
    assert s["status"] == "timeout" and "--timeout 1.5" in s["message"]
    assert_all_gone(job.pids)


def test_sigterm_ignored_gets_sigkill_after_grace(job):
    r = job.run("stubborn", np=1, extra=("--timeout", "1"))
    assert r.returncode == 124
    rank0 = [p for p in job.summary()["processes"] if p["name"] == "rank 0"][0]
    assert rank0["signal"] == "SIGKILL" and rank0["torn_down"]
    assert_all_gone(job.pids)


def test_busy_master_port_starts_nothing(job):
    with socket.socket() as s:
        s.bind(("", 0))
        s.listen(1)
        port = s.getsockname()[1]
        args = [a if a != "auto" else str(port) for a in job.args("ok")]
        r = run_process(*args, env=job.environ, timeout=30)
    assert r.returncode == 1
    assert (
        r.stderr
        == f"mslaunch: error: --master-port: port {port} is already in use on this machine; pass --master-port auto or "
        "another free port\n"
    )
    assert not job.dir.exists() and os.listdir(job.pids) == []


def test_max_restarts_new_attempt_dir(job):
    r = job.run("failonce", "0.2", "1", "5", extra=("--max-restarts", "1"))
    assert r.returncode == 0, r.stderr
    s = job.summary()
    assert (s["status"], s["attempts"]) == ("succeeded", 2)
    assert (job.dir / "worker_1.log").read_text().splitlines()[-1] == "RuntimeError: rank1 fails with 5"
    assert (job.dir / "attempt_1" / "worker_1.log").read_text().splitlines()[-1] == "rank1 second attempt ok"
    assert_all_gone(job.pids)


def test_ci_outputs(job, tmp_path):
    out_json, out_xml = tmp_path / "s.json", tmp_path / "junit.xml"
    r = job.run("fail", "0.3", "0", "7", extra=("--summary-json", str(out_json), "--junit", str(out_xml), "--quiet"))
    assert r.returncode == 7
    assert json.loads(out_json.read_text()) == job.summary()
    suite = ET.parse(out_xml).getroot()
    assert (suite.tag, suite.get("tests"), suite.get("failures")) == ("testsuite", "3", "1")
    cases = {c.get("name"): c for c in suite}
    failure = cases["rank 0"].find("failure")
    # the line it prints is no traceback: its cause is unknown, with that line as the evidence
    assert failure.get("message") == (
        f"exit code 7; unknown: RuntimeError: rank0 fails with 7 (hint: no known cause matched: read the end of "
        f"{job.dir}/worker_0.log)"
    )
    assert "RuntimeError: rank0 fails with 7" in failure.text
    assert cases["rank 1"].find("skipped") is not None
    assert r.stdout == ""  # --quiet: no rank output
    assert_all_gone(job.pids)


def test_ranktable_method_dirs_and_env(job, tmp_path):
    hccn = tmp_path / "hccn"
    hccn.mkdir()
    (hccn / "localhost.conf").write_text("address_0=192.1.27.6\naddress_1=192.2.27.6\n")
    r = job.run("env", np=2, extra=("--method", "ranktable", "--hccn-dir", str(hccn)))
    assert r.returncode == 0, r.stderr
    table = json.loads((job.dir / "rank_table.json").read_text())
    assert table["server_list"][0]["device"][1] == {"device_id": "1", "device_ip": "192.2.27.6", "rank_id": "1"}
    for rank in (0, 1):
        ddir = job.dir / f"device{rank}"
        dump = dict(line.split("=", 1) for line in (ddir / f"env{rank}.log").read_text().splitlines())
        seen = dict(
            line.split("=", 1) for line in (job.dir / f"worker_{rank}.log").read_text().splitlines() if "=" in line
        )
        for env in (dump, seen):
            assert (env["RANK_ID"], env["DEVICE_ID"], env["RANK_SIZE"]) == (str(rank), str(rank), "2")
            assert env["RANK_TABLE_FILE"] == str(job.dir / "rank_table.json")
        assert seen["cwd"] == str(ddir)
    assert_all_gone(job.pids)


def test_detach_ps_status_logs_stop(job, tmp_path):
    env = job.environ
    r = run_process(*job.args("hang", extra=("--detach",)), env=env, cwd=str(tmp_path), timeout=60)
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.strip()
    job.wait_started(3)
    cli = lambda *a: run_cli(*a, env=env)  # noqa: E731  (in this process: they start nothing; see tests/harness/cli.py)
    ps = cli("ps")
    assert job_id in ps.stdout and "running" in ps.stdout
    st = cli("status", job_id)
    assert st.returncode == 0 and f"job {job_id}: running" in st.stdout
    logs = cli("logs", "tail", job_id, "-n", "5", "--rank", "1")
    assert logs.stdout.splitlines()[0].startswith("[rank 1] rank1 started pid=")
    assert "[rank 0]" not in logs.stdout
    stop = cli("stop", job_id)
    assert stop.returncode == 0, stop.stderr
    st = cli("status", job_id, "--json")
    assert st.returncode == 1 and json.loads(st.stdout)["status"] == "stopped"
    assert_all_gone(job.pids)


def test_logs_tail_follow_and_grep(job, tmp_path):
    p = job.popen("ok", "2")
    job.wait_started(3)
    # -n 5: the 'done' lines show whether they come before the follower starts (a loaded machine
    # may start it late) or while it follows; either way exactly once, and nothing else.
    follow = run_process(
        "logs", "tail", "--log-dir", str(job.dir), "-f", "-n", "5", "--grep", "done", env=job.environ, timeout=120
    )
    p.communicate(timeout=30)
    assert p.returncode == 0
    assert sorted(follow.stdout.splitlines()) == ["[rank 0] rank0 done", "[rank 1] rank1 done"]
    ls = run_cli("logs", "ls", str(job.dir), env=job.environ)
    assert [line.split()[:2] for line in ls.stdout.splitlines()] == [
        ["rank", "0"],
        ["rank", "1"],
        ["scheduler", str((job.dir / "scheduler.log").stat().st_size)],
    ]
    assert_all_gone(job.pids)


def test_bad_program_is_a_start_failure(job, tmp_path):
    # a missing program is refused before anything starts (exit 2, no job files): in this process
    r = run_cli(
        "run",
        "--np",
        "1",
        "--log-dir",
        str(job.dir),
        "--no-python",
        "--master-port",
        "auto",
        str(tmp_path / "missing.sh"),
        env=job.environ,
    )
    assert r.returncode == 2 and f"no such file '{tmp_path}/missing.sh'" in r.stderr, r.stderr
    assert not (job.dir / "summary.json").exists()
    # one that is there but cannot be executed fails at start
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\x00\x01\x02")
    junk.chmod(0o755)
    r = run_process(
        "run",
        "--np",
        "1",
        "--log-dir",
        str(job.dir),
        "--no-python",
        "--master-port",
        "auto",
        str(junk),
        env=job.environ,
        timeout=60,
    )
    assert r.returncode == 1
    assert f"cannot start '{junk}': Exec format error" in r.stderr, r.stderr
    # the scheduler (started first) did not survive
    s = job.summary()
    assert s["status"] == "failed"


@pytest.mark.mpi
def test_mpirun_launcher_runs_and_names_failing_rank(job):
    """One job under mpirun (--method mpi): each rank prints its environment first (its rank in
    RANK_ID, DEVICE_ID and OMPI_COMM_WORLD_RANK), then rank 1 fails with 4 and is named the root
    cause.  (A job under mpirun that succeeds: tests/execution/mpirun/test_faults_mpirun.py.)"""
    require_tool("mpirun", package="openmpi-bin")
    env_then_rank = ("--no-python", "bash", "-c", 'env; exec "$0" "$@"', sys.executable, PROG, "fail", "1.0", "1", "4")
    args = job.args(np=2, extra=("--launcher", "mpirun", "--method", "mpi"))[:-1]  # without the program
    r = run_process(*args, *env_then_rank, env=job.environ, cwd=str(job.dir.parent), timeout=60)
    assert r.returncode == 4, r.stderr + (job.dir / "mpirun.log").read_text()
    cause = job.summary()["root_cause"]
    assert (cause["name"], cause["exit_code"]) == ("rank 1", 4)
    for rank in (0, 1):
        seen = dict(
            line.split("=", 1) for line in (job.dir / f"worker_{rank}.log").read_text().splitlines() if "=" in line
        )
        assert (seen["RANK_ID"], seen["DEVICE_ID"], seen["OMPI_COMM_WORLD_RANK"]) == (str(rank), str(rank), str(rank))
    assert_all_gone(job.pids)


def test_the_orphan_reaper_looks_again_until_nothing_new_runs(tmp_path) -> None:
    """A descendant that forks between the reaper's look and its SIGKILL leaves a child only the
    next look sees: the reaper looks until a look finds nothing new (real processes, in a
    process of their own)."""
    import subprocess as sp
    import sys as _sys

    from tests.harness.faultkit import kill_all, marked, new_marker

    marker = new_marker()
    try:
        out = sp.run(
            [_sys.executable, os.path.join(TESTS, "scripts", "reap_forker.py"), marker],
            capture_output=True,
            text=True,
            timeout=120,
            env=dict(os.environ, PYTHONPATH=os.getcwd()),
        )
        assert out.returncode == 0, out.stderr
        killed, left = (int(x) for x in out.stdout.split())
        assert killed > 1 and left == 0, out.stdout
    finally:
        kill_all(marked(marker))
