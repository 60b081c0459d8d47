"""launcher.cli.hiddenenv: no --env value in the process title of a run (detached or not)."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import time

import psutil
import pytest

from launcher.cli.hiddenenv import HIDDEN_ENV_VAR, hide_env_values, restore_argv
from tests.harness.cli import mslaunch_argv, run_process
from tests.harness.paths import TESTS

PROG = os.path.join(TESTS, "scripts", "rankprog.py")


def test_every_form_of_env_is_hidden_and_restored_and_the_programs_args_are_kept():
    args = [
        "run",
        "--env",
        "A=1",
        "-e",
        "B=two words",
        "--env=C=x=y",
        "-eD=4",
        "--env",
        "E=",
        "prog.py",
        "--env",
        "A=1",
    ]
    shown, hidden = hide_env_values(args, ["A=1", "B=two words", "C=x=y", "D=4", "E="])
    assert shown == [
        "run",
        "--env",
        "A=<hidden>",
        "-e",
        "B=<hidden>",
        "--env=C=<hidden>",
        "-eD=<hidden>",
        "--env",
        "E=",
        "prog.py",
        "--env",
        "A=1",  # the program's own argument
    ]
    environ = {HIDDEN_ENV_VAR: json.dumps(hidden), "KEEP": "1"}
    assert restore_argv(["mslaunch", *shown], environ) == ["mslaunch", *args]
    assert environ == {"KEEP": "1"}  # no rank inherits the values' carrier
    assert restore_argv(["mslaunch", *shown], {}) == ["mslaunch", *shown]
    with pytest.raises(ValueError, match=f"^{HIDDEN_ENV_VAR} does not match this command line"):
        restore_argv(["mslaunch", "run"], {HIDDEN_ENV_VAR: json.dumps(hidden)})


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _wait(what, predicate, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


@pytest.mark.e2e
def test_a_detached_runs_title_shows_no_env_value(tmp_path):
    """A real ``run --detach`` (2 ranks, umask 022): its /proc/PID/cmdline names the variables with
    ``<hidden>`` values, the ranks get the real values (and not the carrier variable), the job
    directory (mslaunch.log too) is private; stopped, every pid it made is gone."""
    piddir, job_dir = tmp_path / "pids", tmp_path / "job"
    piddir.mkdir()
    (tmp_path / "s.env").write_text("FILE_SECRET=file-value-7\n")
    env = dict(os.environ, PIDDIR=str(piddir), MSLAUNCH_HOME=str(tmp_path / "home"))
    secrets = ("cli-value-1", "cli-value-2", "cli-value-3")
    r = run_process(
        "run",
        "--np",
        "2",
        "--master-port",
        "auto",
        "--log-dir",
        str(job_dir),
        "--grace",
        "2",
        "--env",
        f"HF_TOKEN={secrets[0]}",
        f"--env=API_KEY={secrets[1]}",
        "-e",
        f"PASSWORD={secrets[2]}",
        "--env-file",
        "s.env",
        "--detach",
        PROG,
        "hang",
        env=env,
        cwd=str(tmp_path),
        timeout=60,
        preexec_fn=lambda: os.umask(0o022),
    )
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.strip()
    pid = int(re.search(r"running in the background \(pid (\d+)\)", r.stderr).group(1))
    pids = [pid]
    try:
        _wait("the ranks did not start", lambda: len([n for n in os.listdir(piddir) if n.endswith(".pids")]) == 3)
        for name in os.listdir(piddir):
            pids += [int(x) for x in (piddir / name).read_text().split()]
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            title = fh.read().decode().split("\0")
        assert not [a for a in title if any(s in a for s in secrets + ("file-value-7",))], title
        for shown in ("HF_TOKEN=<hidden>", "--env=API_KEY=<hidden>", "PASSWORD=<hidden>", "s.env"):
            assert shown in title, title
        rank = int((piddir / "rank0.pids").read_text().split()[0])
        with open(f"/proc/{rank}/environ", "rb") as fh:
            rank_env = dict(kv.split("=", 1) for kv in fh.read().decode().split("\0") if "=" in kv)
        assert (rank_env["HF_TOKEN"], rank_env["API_KEY"], rank_env["PASSWORD"], rank_env["FILE_SECRET"]) == (
            *secrets,
            "file-value-7",
        )
        assert HIDDEN_ENV_VAR not in rank_env
        job = json.loads((job_dir / "job.json").read_text())
        assert "HF_TOKEN=<secret>" in job["argv"]  # a secret by its name: not even in job.json (0600)
        modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in job_dir.iterdir() if p.is_file()}
        assert "mslaunch.log" in modes and set(modes.values()) == {0o600}, modes
        assert stat.S_IMODE(job_dir.stat().st_mode) == 0o700
        stop = run_process("stop", job_id, env=env, timeout=60)
        assert stop.returncode == 0, stop.stderr
        _wait(f"left running: {[p for p in pids if _alive(p)]}", lambda: not [p for p in pids if _alive(p)])
    finally:
        for p in pids:  # a failing test: SIGKILL what this run made, by pid
            if _alive(p):
                os.kill(p, signal.SIGKILL)
    assert json.loads((job_dir / "summary.json").read_text())["status"] == "stopped"


@pytest.mark.e2e
def test_a_foreground_runs_title_shows_no_env_value_once_it_started(tmp_path):
    """``mslaunch run --env K=V`` in the foreground (as sbatch.sh starts it): once the ranks run,
    /proc/PID/cmdline shows ``K=<hidden>``, its short name (comm) is unchanged, the ranks have the
    values; stopped with SIGTERM (by its pid), every pid it made is gone."""
    piddir = tmp_path / "pids"
    piddir.mkdir()
    env = dict(os.environ, PIDDIR=str(piddir), MSLAUNCH_HOME=str(tmp_path / "home"))
    argv = mslaunch_argv(
        "run",
        "--np",
        "2",
        "--master-port",
        "auto",
        "--quiet",
        "--log-dir",
        str(tmp_path / "job"),
        "--env",
        "HF_TOKEN=fg-value-1",
        "-eAPI_KEY=fg-value-2",
        PROG,
        "hang",
    )
    proc = subprocess.Popen(argv, env=env, cwd=str(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    pids = [proc.pid]
    try:
        comm = psutil.Process(proc.pid).name()
        _wait("the ranks did not start", lambda: len([n for n in os.listdir(piddir) if n.endswith(".pids")]) == 3)
        for name in os.listdir(piddir):
            pids += [int(x) for x in (piddir / name).read_text().split()]
        with open(f"/proc/{proc.pid}/cmdline", "rb") as fh:
            title = fh.read().decode()
        assert "fg-value" not in title, title
        assert "--env HF_TOKEN=<hidden> -eAPI_KEY=<hidden>" in title, title
        with open(f"/proc/{proc.pid}/comm") as fh:
            assert fh.read().strip() == comm
        rank = int((piddir / "rank1.pids").read_text().split()[0])
        with open(f"/proc/{rank}/environ", "rb") as fh:
            rank_env = dict(kv.split("=", 1) for kv in fh.read().decode().split("\0") if "=" in kv)
        assert (rank_env["HF_TOKEN"], rank_env["API_KEY"]) == ("fg-value-1", "fg-value-2")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 143, err
        _wait(f"left running: {[p for p in pids if _alive(p)]}", lambda: not [p for p in pids if _alive(p)])
    finally:
        for p in pids:  # a failing test: SIGKILL what this run made, by pid
            if _alive(p):
                os.kill(p, signal.SIGKILL)
        if proc.poll() is None:
            proc.wait(timeout=30)


if sys.platform != "linux":  # /proc
    pytestmark = pytest.mark.skip("needs /proc")
