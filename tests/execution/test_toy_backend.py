"""Adding a backend takes its module and its registration only: a toy backend, registered by
:mod:`tests.execution.toy_backend`, is listed by ``--launcher``, shows its command in the plan,
and runs a 2-rank job through ``mslaunch run`` (the CLI in a child process that imports it)."""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess

import psutil
import pytest

from launcher.errors import PlanError
from launcher.execution.backend import backend_names, get_backend, unregister_backend
from tests.harness.cli import run_process

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROG = os.path.join(ROOT, "tests", "scripts", "rankprog.py")


def with_toy(tmp_path, *args: str, piddir=None) -> subprocess.CompletedProcess:
    """``mslaunch ARGS`` as a process, with the toy backend's module imported first (as a plugin would be)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    if piddir is not None:
        env["PIDDIR"] = str(piddir)
    return run_process(*args, imports=("tests.execution.toy_backend",), env=env, cwd=str(tmp_path), timeout=120)


def test_registration_alone_makes_the_name_known():
    from launcher.cli.spec import check_launcher

    with pytest.raises(PlanError, match="use one of local, ssh, mpirun, slurm$"):
        check_launcher("toy")
    toy = importlib.reload(importlib.import_module("tests.execution.toy_backend"))  # (re-)registers "toy"

    try:
        assert backend_names() == ("local", "ssh", "mpirun", "slurm", "toy")
        assert get_backend("toy").factory is toy.ToyBackend
        check_launcher("toy")
    finally:
        unregister_backend("toy")
    assert "toy" not in backend_names()


def test_toy_backend_in_the_cli_help_and_dry_run(tmp_path):
    r = with_toy(tmp_path, "run", "--help")
    flat = " ".join(r.stdout.replace("\u2502", " ").split())  # rich wraps the help text inside its box
    assert r.returncode == 0 and "local | ssh | mpirun | slurm | toy" in flat, r.stdout
    r = with_toy(tmp_path, "run", "--dry-run", "--json", "--launcher", "toy", "--np", "2", PROG, "ok")
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert plan["launcher"] == "toy" and plan["toy"] == ["toy-launch", "--procs", "3"]
    r = with_toy(tmp_path, "run", "--launcher", "nope", "--np", "2", PROG, "ok")
    assert r.returncode == 2 and "unknown launcher 'nope'; use one of local, ssh, mpirun, slurm, toy" in r.stderr


def test_toy_backend_runs_a_2_rank_job(tmp_path):
    piddir = tmp_path / "pids"
    piddir.mkdir()
    job = tmp_path / "job"
    try:
        r = with_toy(
            tmp_path,
            "run",
            "--launcher",
            "toy",
            "--np",
            "2",
            "--master-port",
            "auto",
            "--log-dir",
            str(job),
            "--grace",
            "2",
            PROG,
            "ok",
            "0.2",
            piddir=piddir,
        )
        assert r.returncode == 0, r.stderr
        summary = json.loads((job / "summary.json").read_text())
        assert summary["status"] == "succeeded"
        assert [(p["name"], p["exit_code"]) for p in summary["processes"] if p["name"] != "scheduler"] == [
            ("rank 0", 0),
            ("rank 1", 0),
        ]
        assert (job / "worker_1.log").read_text().splitlines()[-1] == "rank1 done"
        assert json.loads((job / "plan.json").read_text())["toy"] == ["toy-launch", "--procs", "3"]
        pids = [int(x) for f in os.listdir(piddir) for x in (piddir / f).read_text().split()]
        assert len(pids) == 6  # scheduler and 2 ranks, each with a child
        assert [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE] == []
    finally:
        for f in os.listdir(piddir):
            for pid in (piddir / f).read_text().split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass


def test_a_local_only_backend_refuses_remote_hosts(tmp_path):
    r = with_toy(
        tmp_path, "run", "--launcher", "toy", "-H", "10.9.9.9:2", "--log-dir", str(tmp_path / "job"), PROG, "ok"
    )
    assert (
        r.returncode == 1 and "--launcher toy runs on this machine only, but the inventory has 10.9.9.9" in r.stderr
    ), r.stderr
    assert not (tmp_path / "job" / "plan.json").exists()  # refused before anything was written
