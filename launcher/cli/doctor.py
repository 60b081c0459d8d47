"""``mslaunch doctor``: check every host of a job in parallel before running it.

Takes the same job options as ``run`` (inventory, method, launcher, program...) and prints one
table row per host with ✓/✗ per check (see :mod:`launcher.execution.checks.doctor`).  Exit code 0 when
nothing failed, 1 when any check shows ✗, 2 for bad input.
"""

from __future__ import annotations

import json
import posixpath
import sys
from dataclasses import replace
from typing import Any, Dict, Optional

import typer

from launcher.cli.docs import epilog
from launcher.cli.options import PROGRAM_CONTEXT, JobOptions, with_job_options
from launcher.cli.spec import build_spec
from launcher.cli.ssh_flags import with_ssh_settings
from launcher.errors import PlanError
from launcher.execution.ssh.settings import SSHSettings
from launcher.planning.health.policy import DEFAULT_POLICY, DEFAULT_THRESHOLD
from launcher.planning.job.kinds import Method


def register(app: typer.Typer) -> None:
    app.command("doctor", context_settings=PROGRAM_CONTEXT, epilog=epilog("ssh"))(doctor_cmd)


@with_job_options
@with_ssh_settings("accept_new", "connect_timeout", before="cpu_probe")
def doctor_cmd(
    as_json: bool = typer.Option(False, "--json", help="Print the results as JSON instead of a table."),
    hccn_path: str = typer.Option(
        "/etc/hccn.conf", "--hccn-path", help="hccn.conf to look for on every host (ranktable method)."
    ),
    max_skew: float = typer.Option(1.0, "--max-skew", help="Allowed clock difference to this machine, s."),
    cpu_probe: Optional[bool] = typer.Option(
        None,
        "--cpu-probe/--no-cpu-probe",
        help=(
            "Time MindSpore's CPU kernels on every host (default: when the job is a MindSpore CPU job or no program is "
            "given; cached)."
        ),
        rich_help_panel="CPU",
    ),
    health: bool = typer.Option(
        False,
        "--health",
        help=(
            "Instead of the checks: the health check of every inventory host (compute kernel, paired transfers; "
            "verdict ok "
            "/ slow / faulty). Exit 1 when a host is slow or faulty. See docs/health.md."
        ),
        rich_help_panel="Health",
    ),
    health_kernel: str = typer.Option(
        "numpy",
        "--health-kernel",
        help="numpy | mindspore: the compute kernel of --health (a matmul).",
        rich_help_panel="Health",
    ),
    health_threshold: float = typer.Option(
        DEFAULT_THRESHOLD,
        "--health-threshold",
        help=("--health: a host below this fraction of the median (compute or network) is slow."),
        rich_help_panel="Health",
    ),
    device_target: Optional[str] = typer.Option(
        None,
        "--device-target",
        help=(
            "--health: ascend | gpu | cpu: check the hosts' NPUs (npu-smi, hccn_tool) or GPUs (nvidia-smi). Default: "
            "the "
            "program's --device-target, else DEVICE_TARGET; none: devices not checked."
        ),
        rich_help_panel="Health",
    ),
    device_checks: str = typer.Option(
        DEFAULT_POLICY,
        "--device-checks",
        help=(
            "--health: off | try | require: require also fails a host whose device checks could not run (tool missing, "
            "timed out)."
        ),
        rich_help_panel="Health",
    ),
    *,
    opts: JobOptions,
    ssh: SSHSettings,
) -> None:
    """Check every host in parallel: SSH, Python and MindSpore versions, the workload, the master
    port, clock skew, hccn.conf (ranktable method), mpirun (mpirun launcher). Exit 1 on any ✗."""
    from launcher.execution.backend import doctor_checks, get_backend
    from launcher.execution.checks.doctor import DoctorJob, reports_json, run_doctor
    from launcher.planning.build import build_plan

    if health:
        _health_doctor(opts, ssh, as_json, health_kernel, health_threshold, device_target, device_checks)
        return
    if opts.launcher == "slurm":
        _slurm_doctor(opts, as_json)
        return
    if not opts.hosts and not opts.host_list:
        raise PlanError("pass --hosts FILE or -H LIST: doctor checks the hosts of an inventory", field="--hosts")
    method = opts.method
    has_program = bool(opts.program or opts.module)
    plan_opts = opts
    if not has_program:
        plan_opts = replace(plan_opts, program=("mslaunch-doctor-no-program.py",), no_python=False)
    if method == Method.RANKTABLE:  # device IPs are not needed to check hosts
        plan_opts = replace(plan_opts, method=Method.DYNAMIC)
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
    if method == Method.DYNAMIC and plan.scheduler is not None and plan.master_port is not None:
        master = (plan.scheduler.host, plan.master_port)
    job = DoctorJob(
        hosts=plan.hosts,
        python=python,
        script=script,
        module=opts.module,
        exe=opts.program[0] if opts.no_python and opts.program else None,
        cwd=spec.cwd,
        master=master,
        hccn_path=posixpath.normpath(hccn_path) if method == Method.RANKTABLE else None,
        tools=tuple(c for c in (get_backend(plan.launcher).doctor_check,) if c is not None),
        tool_columns=tuple(c.name for c in doctor_checks()),
        max_skew=max_skew,
    )
    ssh = replace(ssh, config=spec.ssh_config)
    reports = run_doctor(job, ssh)
    failed = [r for r in reports if not r.ok]
    if cpu_probe is None:
        cpu_probe = spec.cpu.mode != "off" and (spec.cpu.mindspore_cpu or not has_program or _imports_mindspore(opts))
    cpu: Dict[str, Any] = {}
    if cpu_probe:
        from launcher.execution.checks.doctor import cpu_probes
        from launcher.jobs.jobfile import mslaunch_home

        with_ms = [h for h, r in zip(plan.hosts, reports) if r.check("mindspore").ok]
        cpu = cpu_probes(
            with_ms,
            python,
            mslaunch_home(),
            ssh,
            on_probe=None if as_json else lambda msg: sys.stderr.write(f"mslaunch: {msg}\n"),
        )
    if as_json:
        hosts = reports_json(reports)
        for entry in hosts:
            if entry["host"] in cpu:
                entry["cpu"] = _cpu_json(cpu[entry["host"]])
        sys.stdout.write(json.dumps({"ok": not failed, "hosts": hosts}, indent=2) + "\n")
    else:
        _print_table(reports)
        _print_cpu(cpu)
    raise typer.Exit(1 if failed else 0)


def _health_doctor(
    opts: JobOptions,
    ssh: SSHSettings,
    as_json: bool,
    kernel: str,
    threshold: float,
    device_target: Optional[str] = None,
    device_checks: str = DEFAULT_POLICY,
) -> None:
    """``doctor --health`` (see :mod:`launcher.cli.health`); exit 1 when a host is slow or faulty
    (a faulty device makes its host faulty)."""
    from launcher.cli.devices import doctor_devices
    from launcher.cli.health import check_hosts, check_kernel, print_result, result_json
    from launcher.planning.health.devices import device_target as target_of
    from launcher.planning.health.policy import check_policy, check_threshold

    check_kernel(kernel)
    check_threshold(threshold)
    check_policy(device_checks)
    if device_target is not None:
        target_of((), {}, device_target)  # an unknown --device-target: refused before any host is reached
    if opts.launcher != "slurm" and not opts.hosts and not opts.host_list:
        raise PlanError(
            "pass --hosts FILE or -H LIST: doctor --health checks the hosts of an inventory", field="--hosts"
        )
    plan_opts = (
        opts
        if (opts.program or opts.module)
        else replace(opts, program=("mslaunch-doctor-no-program.py",), no_python=False)
    )
    if plan_opts.method == Method.RANKTABLE:  # device IPs are not needed to check hosts
        plan_opts = replace(plan_opts, method=Method.DYNAMIC)
    if opts.launcher == "slurm":
        from launcher.cli.health import need_allocation

        need_allocation()  # before the spec: its inventory is the allocation's
    spec = build_spec(plan_opts)
    devices = doctor_devices(spec, device_target, device_checks)
    if (
        devices.choice.target == "ascend"
        and devices.specs
        and opts.method == Method.RANKTABLE
        and not opts.rank_table_file
    ):
        devices = doctor_devices(_with_device_ips(opts, spec), device_target, device_checks)
    if opts.launcher == "slurm":
        from launcher.cli.health import check_slurm

        result = check_slurm(opts.python, kernel, threshold, devices)
    else:
        result = check_hosts(spec, ssh, kernel, threshold, devices)
    if as_json:
        sys.stdout.write(result_json(result, kernel, threshold, devices) + "\n")
    else:
        print_result(result)
        note = devices.summary()["note"]
        if note:
            sys.stdout.write(f"{note}\n")
    raise typer.Exit(0 if result.ok else 1)


def _with_device_ips(opts: JobOptions, spec: Any) -> Any:
    """``spec`` with the device IPs the ranktable method's rank table would have (hccn.conf,
    ``--hccn``, the YAML's ``device_ips``), for the device checks; unchanged (and a note on
    stderr) when they cannot be found: the IPs are then not compared."""
    from launcher.cli.spec import hccn_pair
    from launcher.errors import MsLaunchError
    from launcher.planning.ranktable import resolve_device_ips

    try:
        ips = resolve_device_ips(
            spec.inventory, hccn_dir=opts.hccn_dir, hccn_files=dict(hccn_pair(h) for h in opts.hccn)
        )
    except MsLaunchError as exc:
        sys.stderr.write(f"mslaunch: doctor --health: device IPs not compared: {exc}\n")
        return spec
    return replace(spec, device_ips=ips)


def _imports_mindspore(opts: JobOptions) -> bool:
    """The program's source imports MindSpore (checked on this machine; see ``launcher.cli.cpuspec.cpu_spec``)."""
    from launcher.errors import MsLaunchError
    from launcher.execution.checks.cpu import local_runner, program_facts

    if opts.no_python or not (opts.module or opts.program):
        return False
    tail = ("--module", opts.module) if opts.module else ("--script", opts.program[0])
    try:
        return program_facts(local_runner(opts.python or sys.executable), tail).get("imports_mindspore") is True
    except MsLaunchError:
        return False


def _cpu_json(outcome: Any) -> Dict[str, Any]:
    """One host's CPU probe for ``doctor --json``."""
    from launcher.planning.cpu.probe import isa_advice

    if isinstance(outcome, str) or outcome.probe is None:
        return {"probed": False, "note": outcome if isinstance(outcome, str) else outcome.note}
    p = outcome.probe
    advice = isa_advice(p)
    return {
        "probed": True,
        "cached": outcome.cached,
        "note": outcome.note,
        "summary": advice.summary,
        "set": {"ONEDNN_MAX_CPU_ISA": advice.isa} if advice.isa else {},
        "gain": round(advice.gain, 2),
        "onednn": p.onednn,
        "onednn_isa": p.onednn_isa,
        "numpy_gflops": p.numpy_gflops,
        "probe_seconds": p.seconds,
        "variants": [
            {
                "isa": v.isa,
                "error": v.error,
                "kernels": {k: {"impl": t.impl, "ms": t.ms, "gflops": t.gflops} for k, t in v.kernels.items()},
            }
            for v in p.variants
        ],
    }


def _print_cpu(cpu: Dict[str, Any]) -> None:
    """One block per probed host: the verdict, then each variant's figures."""
    from rich.markup import escape

    from launcher.cli.render import console
    from launcher.planning.cpu.probe import isa_advice

    con = console()
    for host, outcome in cpu.items():
        if isinstance(outcome, str) or outcome.probe is None:
            con.print(
                f"[bold]cpu[/bold] {escape(host)}: {escape(outcome if isinstance(outcome, str) else outcome.note)}",
                soft_wrap=True,
                highlight=False,
            )
            continue
        p = outcome.probe
        advice = isa_advice(p)
        fix = (
            f"mslaunch sets ONEDNN_MAX_CPU_ISA={advice.isa} for its MindSpore CPU ranks"
            if advice.isa
            else "nothing to set"
        )
        con.print(f"[bold]cpu[/bold] {escape(host)}: {escape(advice.summary)}; {fix}", soft_wrap=True, highlight=False)
        ref = f"; numpy matmul {p.numpy_gflops:.0f} GFLOPS" if p.numpy_gflops else ""
        con.print(
            f"  oneDNN {escape(p.onednn)} ({escape(p.onednn_isa)}), MindSpore {escape(p.mindspore)}{ref}; "
            f"probe {p.seconds:.1f} s{' (cached)' if outcome.cached else ''}",
            soft_wrap=True,
            highlight=False,
        )
        for v in p.variants:
            name = f"ONEDNN_MAX_CPU_ISA={v.isa}" if v.isa else "default"
            if v.error:
                con.print(f"  {name}: failed: {escape(v.error)}", soft_wrap=True, highlight=False)
                continue
            figs = ", ".join(f"{k} {t.gflops:.1f} GFLOPS ({escape(t.impl or '?')})" for k, t in v.kernels.items())
            con.print(f"  {name}: {figs}", soft_wrap=True, highlight=False)


def _print_table(reports) -> None:
    from rich.table import Table

    from launcher.cli.render import console

    names = [c.name for c in reports[0].checks] if reports else []
    used = [name for name in names if any(r.check(name).ok is not None for r in reports)]
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


def _slurm_doctor(opts: JobOptions, as_json: bool) -> None:
    """``doctor --launcher slurm`` (see :mod:`launcher.execution.slurm.doctor`); exit 1 on any ✗."""
    import os

    from launcher.execution.slurm.doctor import slurm_checks

    checks = slurm_checks(os.environ, opts.np, opts.python or sys.executable)
    if as_json:
        sys.stdout.write(json.dumps([c.to_json() for c in checks], indent=2) + "\n")
    else:
        from rich.markup import escape
        from rich.table import Table

        from launcher.cli.render import make_console

        table = Table()
        for col in ("check", "", "detail"):
            table.add_column(col, overflow="fold")
        for c in checks:
            table.add_row(escape(c.name), "✓" if c.ok else "✗", escape(c.detail))
        make_console().print(table)
    raise typer.Exit(0 if all(c.ok for c in checks) else 1)
