"""``mslaunch doctor``: check every host of a job in parallel before running it.

Takes the same job options as ``run`` (inventory, method, launcher, program...) and prints one
table row per host with ✓/✗ per check (see :mod:`launcher.execution.doctor`).  Exit code 0 when
nothing failed, 1 when any check shows ✗, 2 for bad input.
"""
from __future__ import annotations

import json
import posixpath
import sys
from dataclasses import replace
from typing import Dict, Optional

import typer

from launcher.cli.options import PROGRAM_CONTEXT, JobOptions, build_spec, with_job_options
from launcher.errors import PlanError


def register(app: typer.Typer) -> None:
    app.command("doctor", context_settings=PROGRAM_CONTEXT)(doctor_cmd)


@with_job_options
def doctor_cmd(
    as_json: bool = typer.Option(False, "--json", help="Print the results as JSON instead of a table."),
    hccn_path: str = typer.Option("/etc/hccn.conf", "--hccn-path", help="hccn.conf to look for on every host (ranktable method)."),
    max_skew: float = typer.Option(1.0, "--max-skew", help="Allowed clock difference to this machine, s."),
    ssh_accept_new: bool = typer.Option(False, "--ssh-accept-new", help="Trust and record unknown SSH host keys (first use).", rich_help_panel="SSH"),
    ssh_connect_timeout: float = typer.Option(10.0, "--ssh-connect-timeout", help="Seconds to connect to a host.", rich_help_panel="SSH"),
    *,
    opts: JobOptions,
) -> None:
    """Check every host in parallel: SSH, Python and MindSpore versions, the workload, the master
    port, clock skew, hccn.conf (ranktable method), mpirun (mpirun launcher). Exit 1 on any ✗."""
    from launcher.execution.doctor import DoctorJob, reports_json, run_doctor
    from launcher.planning.plan import build_plan

    if not opts.hosts and not opts.host_list:
        raise PlanError("pass --hosts FILE or -H LIST: doctor checks the hosts of an inventory", field="--hosts")
    method = opts.method
    has_program = bool(opts.program or opts.module)
    plan_opts = opts
    if not has_program:
        plan_opts = replace(plan_opts, program=("mslaunch-doctor-no-program.py",), no_python=False)
    if method == "ranktable":  # device IPs are not needed to check hosts
        plan_opts = replace(plan_opts, method="dynamic")
    spec = build_spec(plan_opts)
    plan = build_plan(spec)
    python: Dict[str, Optional[str]] = {}
    script: Dict[str, Optional[str]] = {}
    for proc in plan.processes:
        if proc.host in python:
            continue
        if opts.no_python:
            python[proc.host], script[proc.host] = None, None
        else:
            python[proc.host] = proc.argv[0]
            script[proc.host] = proc.argv[1] if has_program and not opts.module else None
    master = None
    if method == "dynamic" and plan.scheduler is not None and plan.master_port is not None:
        master = (plan.scheduler.host, plan.master_port)
    job = DoctorJob(
        hosts=plan.hosts,
        python=python,
        script=script,
        module=opts.module,
        exe=opts.program[0] if opts.no_python and opts.program else None,
        cwd=spec.cwd,
        master=master,
        hccn_path=posixpath.normpath(hccn_path) if method == "ranktable" else None,
        mpirun=plan.launcher == "mpirun",
        max_skew=max_skew,
    )
    reports = run_doctor(job, ssh_config=spec.ssh_config, accept_new=ssh_accept_new, connect_timeout=ssh_connect_timeout)
    failed = [r for r in reports if not r.ok]
    if as_json:
        sys.stdout.write(json.dumps({"ok": not failed, "hosts": reports_json(reports)}, indent=2) + "\n")
    else:
        _print_table(reports)
    raise typer.Exit(1 if failed else 0)


def _print_table(reports) -> None:  # type: ignore[no-untyped-def]
    from rich.table import Table

    from launcher.cli.render import console
    from launcher.execution.doctor import CHECKS

    used = [name for name in CHECKS if any(r.check(name).ok is not None for r in reports)]
    table = Table(title="mslaunch doctor", show_lines=False)
    table.add_column("host", no_wrap=True)
    for name in used:
        table.add_column(name)
    for r in reports:
        cells = []
        for name in used:
            c = r.check(name)
            colour = {"✓": "green", "✗": "red", "-": "dim"}[c.mark]
            text = c.detail if c.ok is not False else c.detail.split(";")[0]
            cells.append(f"[{colour}]{c.mark}[/{colour}] {_short(text)}")
        table.add_row(r.host, *cells)
    con = console()
    con.print(table)
    bad = [(r.host, c) for r in reports for c in r.checks if c.ok is False]
    from rich.markup import escape

    for host, c in bad:
        con.print(f"[red]✗[/red] {escape(host)} {escape(c.name)}: {escape(c.detail)}", soft_wrap=True, highlight=False)
    if bad:
        con.print(f"{len({h for h, _ in bad})} of {len(reports)} host(s) have problems", highlight=False)
    else:
        con.print(f"all {len(reports)} host(s) ok", highlight=False)


def _short(text: str, width: int = 28) -> str:
    from rich.markup import escape

    return escape(text if len(text) <= width else text[: width - 1] + "…")
