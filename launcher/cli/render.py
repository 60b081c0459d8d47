"""rich rendering of plans and job results for the CLI."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Any, List, Optional

from rich.console import Console

from launcher.planning.inventory.model import SshOptions
from launcher.planning.job.spec import Plan

if TYPE_CHECKING:
    from launcher.execution.results import JobResult
    from launcher.logs.hangreport import HangReport

_console: Optional[Console] = None

#: Width of a console that is not a terminal (a pipe, a file, a CI log): tables take the width
#: their cells need, so a path is printed whole, never folded at 80 columns.
UNWRAPPED_WIDTH = 1 << 16


def make_console(stderr: bool = False, **kwargs: Any) -> Console:
    """A rich console for stdout (or stderr): a terminal's width on a terminal; elsewhere no
    width at all in effect (:data:`UNWRAPPED_WIDTH`), so nothing is wrapped or folded."""
    con = Console(stderr=stderr, **kwargs)
    if con.is_terminal:
        return con
    return Console(stderr=stderr, width=UNWRAPPED_WIDTH, **kwargs)


def console(stderr: bool = False) -> Console:
    global _console
    if stderr:
        return make_console(stderr=True)
    if _console is None:
        _console = make_console()
    return _console


#: Plans with more processes than this print the first and last :data:`PLAN_EDGE` of them
#: (``plan --all`` prints every one; ``--json`` is always complete).
PLAN_SUMMARY_OVER = 64
PLAN_EDGE = 8


def print_plan(plan: Plan, everything: bool = False) -> None:
    """The plan, one block per process (argv and env in full), then artefacts and mpirun's argv.

    Args:
        plan: the plan.
        everything: every process even in a big plan; otherwise a plan of more than
            :data:`PLAN_SUMMARY_OVER` processes shows the first and last :data:`PLAN_EDGE` and
            one line counting the others.
    """
    con = console()
    out = con.print
    hosts = plan.hosts
    shown_hosts = (
        ",".join(h.name for h in hosts)
        if len(hosts) <= 2 * PLAN_EDGE or everything
        else (",".join(h.name for h in hosts[:PLAN_EDGE]) + f",... ({len(hosts)} hosts)")
    )
    out(
        f"[bold]job[/bold] {plan.job_id}  method={plan.method}  launcher={plan.launcher}  "
        f"world_size={plan.world_size}  hosts={shown_hosts}",
        soft_wrap=True,
        highlight=False,
    )
    out(f"[bold]job dir[/bold] {plan.job_dir}", soft_wrap=True)
    reached = [h for h in hosts if h.ssh.user is not None or h.ssh.port is not None]
    for h in reached if everything or len(reached) <= 2 * PLAN_EDGE else reached[:PLAN_EDGE]:
        out(f"[bold]ssh[/bold] {h.name}: {ssh_text(h.ssh)}", soft_wrap=True, highlight=False)
    if len(reached) > 2 * PLAN_EDGE and not everything:
        out(
            f"[bold]ssh[/bold] ... {len(reached) - PLAN_EDGE} more hosts with their own ssh user or port",
            soft_wrap=True,
            highlight=False,
        )
    if plan.scheduler is not None:
        out(f"[bold]scheduler[/bold] {plan.master_addr}:{plan.master_port} on {plan.scheduler.host}", soft_wrap=True)
    procs = plan.processes
    skipped = 0
    if not everything and len(procs) > PLAN_SUMMARY_OVER:
        skipped = len(procs) - 2 * PLAN_EDGE
        procs = procs[:PLAN_EDGE] + procs[-PLAN_EDGE:]
    # rich renders a few thousand lines a second: blocks go out as plain text unless styled for a terminal
    plain = not con.is_terminal
    chunk: List[str] = []
    for i, p in enumerate(procs):
        if skipped and i == PLAN_EDGE:
            note = f"... {skipped} processes not shown (mslaunch plan --all, or --json)"
            chunk.append(note + "\n") if plain else out(note, soft_wrap=True, highlight=False, markup=False)
        where = f"host={p.host}"
        if p.rank is not None:
            where += f" rank={p.rank} local_rank={p.local_rank} node_rank={p.node_rank} device_id={p.device_id}"
        lines = [
            f"  cwd:  {p.cwd}",
            f"  argv: {' '.join(shlex.quote(a) for a in p.argv)}",
            f"  env:  {' '.join(f'{k}={shlex.quote(v)}' for k, v in plan.shown_env(p))}",
            f"  log:  {p.log}",
        ]
        if p.cpus is not None:
            from launcher.planning.cpu.hostcores import format_cpus

            lines.append(f"  cpus: {format_cpus(p.cpus)}")
        if p.rank is not None and any(p.rank in t.ranks for t in plan.host_threads):
            lines.append("  threads: set at start from the host's usable cores (see the cpu lines)")
        if plain:
            chunk.append(f"{p.name}  {where}\n" + "\n".join(lines) + "\n")
            if len(chunk) >= 512:
                _write_plain(con, chunk)
            continue
        out(f"[bold cyan]{p.name}[/bold cyan]  {where}", soft_wrap=True, highlight=False)
        for line in lines:
            out(line, soft_wrap=True, highlight=False, markup=False)
    _write_plain(con, chunk)
    for a in plan.artefacts:
        out(f"[bold]artefact[/bold] {a.kind}: {plan.job_dir}/{a.name}", soft_wrap=True)
    for note in plan.cpu_notes:
        tag = "[bold yellow]cpu warning[/bold yellow]" if note in plan.cpu_warnings else "[bold]cpu[/bold]"
        out(f"{tag} ", end="", soft_wrap=True)
        out(note, soft_wrap=True, highlight=False, markup=False)
    from launcher.execution.backend import get_backend

    for key, value in get_backend(plan.launcher).factory.describe(plan).items():  # the backend's command line(s)
        if isinstance(value, list) and all(isinstance(a, str) for a in value):
            out(f"[bold]{key}[/bold]", soft_wrap=True)
            out(" ".join(shlex.quote(a) for a in value), soft_wrap=True, highlight=False, markup=False)


def ssh_text(ssh: SshOptions) -> str:
    """A host's own SSH settings for the plan: ``user=U port=P`` (those that are set)."""
    return " ".join(f"{k}={v}" for k, v in (("user", ssh.user), ("port", ssh.port), ("key", ssh.key)) if v is not None)


def _write_plain(con: Console, chunk: List[str]) -> None:
    """Write ``chunk``'s text to the console's file as is (and empty it)."""
    if chunk:
        con.file.write("".join(chunk))
        chunk.clear()


def print_result(result: "JobResult", quiet: bool = False) -> None:
    """Final summary: a table of processes, and on failure a panel with the root cause's log tail."""
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    con = console(stderr=True)
    secs = result.ended - result.started
    if quiet:
        con.print(
            f"mslaunch: job {result.job_id} {result.status} (exit {result.exit_code}) in {secs:.1f} s", highlight=False
        )
        return
    title = f"job {result.job_id}: {result.status} in {secs:.1f} s"
    wide = con.is_terminal  # else the table is as wide as its cells: paths whole, no padded title
    if not wide:
        con.print(title, highlight=False, markup=False, soft_wrap=True)
    table = Table(title=title if wide else None, title_justify="left")
    for col in ("process", "host", "result", "log"):
        table.add_column(col, overflow="fold")
    for p in result.processes:
        if p.torn_down:
            outcome = Text(p.reason or "stopped by mslaunch", style="dim")
        elif p.failed:
            outcome = Text(p.describe(), style="bold red")
        else:
            outcome = Text("ok", style="green")
        table.add_row(p.name, p.host, outcome, p.log)
    con.print(table)
    if result.hang is not None:
        con.print(hang_table(result.hang))
    if result.root_cause is not None:
        rc = result.root_cause
        body = "\n".join(rc.tail) if rc.tail else "(empty log)"
        title = f"root cause: {rc.name} on {rc.host}: {rc.reason}"
        con.print(Panel(Text(body), title=title, subtitle=rc.log if wide else None, border_style="red", expand=wide))
        if not wide:
            con.print(f"root cause log: {rc.log}", highlight=False, markup=False, soft_wrap=True)
    from launcher.logs.longjob import excluded_lines

    for line in excluded_lines(result.extra):
        con.print(f"mslaunch: {line}", highlight=False, markup=False, soft_wrap=True)
    if result.message:
        con.print(f"mslaunch: {result.message}", highlight=False, markup=False, soft_wrap=True)
    if result.root_cause is not None and result.root_cause.cause is not None:
        from launcher.logs.causes import console_lines

        for line in console_lines(result.root_cause.cause):
            con.print(f"mslaunch: {line}", highlight=False, markup=False, soft_wrap=True)
    con.print(
        f"mslaunch: exit code {result.exit_code}; summary: {result.job_dir}/summary.json",
        highlight=False,
        soft_wrap=True,
    )


def hang_table(hang: "HangReport") -> Any:
    """A hung attempt in one screen: the limit, each rank's last step and innermost main-thread frame, the culprit."""
    from rich.table import Table

    culprit = hang.culprit.rank if hang.culprit is not None else None
    table = Table(title=hang.title(), title_justify="left")
    for col in ("rank", "host", "last step", "silent", "main thread (innermost frame)", "in collective"):
        table.add_column(col, overflow="fold")
    for r in hang.ranks:
        mark = " <- likely culprit" if r.rank == culprit else ""
        silent = "-" if r.silent_s is None else f"{r.silent_s:g} s"
        inside = {True: "yes", False: "no"}.get(r.in_collective, "timed out" if r.timed_out else "?")  # type: ignore[arg-type]  # None (unknown) takes the default, as meant
        table.add_row(
            f"{r.rank}{mark}",
            str(r.host),
            r.last_step or "-",
            silent,
            r.where,
            inside,
            style="bold red" if mark else None,
        )
    return table
