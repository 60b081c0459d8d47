"""``launcher/cli/app.py``: each command imports the modules it needs and no other; the full list
(``mslaunch --help``) has every command, in one order whatever was registered first."""

from __future__ import annotations

import os
from typing import Tuple

import pytest
import typer

from tests.harness.cli import imported_by

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODULES = ("run", "jobs", "check", "doctor", "top", "sbatch", "k8s", "ranktable", "data")


@pytest.mark.parametrize(
    "args, wanted",
    [
        (("status", "--help"), ("jobs",)),
        (("logs", "tail", "--help"), ("jobs",)),
        (("plan", "--help"), ()),
        (("report", "--help"), ("top",)),
        (("sbatch", "--help"), ("run", "sbatch")),
        (("k8s", "gen", "--help"), ("k8s", "run")),
        (("--help",), MODULES),
    ],
)
@pytest.mark.e2e
def test_a_command_imports_its_own_modules_only(args: Tuple[str, ...], wanted: Tuple[str, ...]) -> None:
    r, modules = imported_by(*args)
    assert r.returncode == 0 and "Usage: mslaunch" in r.stdout, r.stderr
    assert sorted(m.rsplit(".", 1)[1] for m in modules if m in {f"launcher.cli.{c}" for c in MODULES}) == sorted(wanted)


def test_the_full_list_has_every_command_in_one_order_whatever_came_first() -> None:
    from launcher.cli import app as appmod

    appmod._register("k8s")
    appmod._register("top")
    appmod._register()
    names = [c.name for c in appmod.app.registered_commands] + [g.name for g in appmod.app.registered_groups]
    assert names == [
        "plan",
        "run",
        "ps",
        "status",
        "stop",
        "check",
        "doctor",
        "top",
        "report",
        "sbatch",
        "env",
        "hostfile",
        "logs",
        "k8s",
        "ranktable",
        "data",
    ]
    # every command the modules add is in the table that says which module adds it
    group = appmod._command()
    assert isinstance(appmod.app, typer.Typer) and sorted(group.commands) == sorted(names)
    assert set(names) == set(appmod._ORDER)


@pytest.mark.e2e
def test_a_run_that_exports_no_metrics_never_imports_prometheus_client(tmp_path) -> None:
    """Every test and user command starts a CLI: a library it does not use is import time paid
    each time (prometheus_client and http.server: a fifth of ``run``'s start)."""
    (tmp_path / "x.py").write_text("")
    r, modules = imported_by("run", "--dry-run", "--np", "2", "x.py", cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert [m for m in ("prometheus_client", "launcher.logs.promexport") if m in modules] == []


#: What a job that succeeds never needs, each a few to 40 ms of every command's start: the cause
#: rules (loaded once something failed), the device checks (``--preflight``), the exporter's model,
#: ``statistics`` (fractions, decimal, random) for a median, ``secrets`` (OpenSSL's hashes) for a token.
NOT_FOR_A_GOOD_RUN = (
    "statistics",
    "secrets",
    "hmac",
    "launcher.logs.causes",
    "launcher.logs.causerules",
    "launcher.logs.tracebacks",
    "launcher.planning.health.devices",
    "launcher.cli.health",
    "launcher.logs.promodel",
    "prometheus_client",
)


@pytest.mark.e2e
def test_a_job_that_succeeds_imports_nothing_it_does_not_use(tmp_path) -> None:
    """The suite starts hundreds of ``mslaunch run`` processes, users one per job: what a job
    that goes well does not use is not imported (0.13 CPU-s of each command's start here)."""
    prog = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "rankprog.py")
    (tmp_path / "x.py").write_text("")
    dry, modules = imported_by("run", "--dry-run", "--np", "2", "x.py", cwd=str(tmp_path))
    assert dry.returncode == 0, dry.stderr
    assert [m for m in NOT_FOR_A_GOOD_RUN if m in modules] == []
    job = str(tmp_path / "job")
    r, modules = imported_by(
        "run",
        "--np",
        "2",
        "--master-port",
        "auto",
        "--tee",
        "none",
        "--log-dir",
        job,
        prog,
        "ok",
        "0.1",
        cwd=str(tmp_path),
    )
    assert r.returncode == 0, r.stderr
    assert [m for m in NOT_FOR_A_GOOD_RUN if m in modules] == []
    assert "launcher.execution.supervision.supervisor" in modules  # it did run the job
