"""``mslaunch ranktable``: generate, merge, validate and show HCCL rank tables.

Exit codes: 0 success; 1 ``validate`` found problems (each printed as ``FILE: json.path: message``
on stderr); 2 bad input (unreadable or invalid-JSON rank table, bad hostfile / hccn.conf, bad
flag), reported by :func:`launcher.cli.app.main` as ``mslaunch: error: <where>: <message>``.

Only ``show`` imports rich; ``gen`` stays on a lean import path (its start-up is benchmarked in
``bench/bench_ranktable.py``).
"""

from __future__ import annotations

import functools
import os
import re
import sys
from typing import Any, Callable, Dict, List, Optional, Tuple, TypeVar

import typer

from launcher.cli.docs import epilog
from launcher.cli.gcpause import no_gc
from launcher.cli.ssh_flags import with_ssh_settings
from launcher.errors import MsLaunchError, RankTableError
from launcher.execution.ssh.settings import SSHSettings

app = typer.Typer(
    help="HCCL rank tables (Ascend): generate from an inventory, merge per-host tables, validate, show.",
    epilog=epilog("ranktables"),
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
    # as the top-level app has them, for when :func:`main` runs this app by itself
    add_completion=False,
    pretty_exceptions_enable=False,
)

F = TypeVar("F", bound=Callable[..., Any])

#: How the commands are named in usage lines and help.
PROG_NAME = "mslaunch ranktable"


def main(args: List[str]) -> None:
    """``mslaunch ranktable ARGS...`` without building the other commands (``python -m launcher``
    and the ``mslaunch`` command come here for ``ranktable``): the same commands, help and
    exit codes as through :func:`launcher.cli.app.main`, without importing the run / plan / jobs
    machinery (about a third of a second of start-up).

    Raises:
        SystemExit: always, with the command's exit code (an :class:`~launcher.errors.MsLaunchError`
            becomes ``mslaunch: error: <where>: <message>`` on stderr and its exit code).
    """
    try:
        app(args=args, prog_name=PROG_NAME)
    except MsLaunchError as exc:
        sys.stderr.write(f"mslaunch: error: {exc}\n")
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)


_VERSION_HELP = "Rank table version: 1.0 (Ascend 910/910B) or 1.2 (Atlas A3 SuperPoD)."
_CHIP_HELP = (
    "Device rules to check: 910 (1, 2, 4 or 8 devices per server; 8 when multi-server) or 910b (1-8). "
    "Version 1.2 (Atlas A3) tables take 1-16 devices per server with either."
)


def _gc_paused(command: F) -> F:
    """Run ``command`` with Python's cyclic garbage collector paused (as ``mslaunch plan`` does,
    see :func:`launcher.cli.gcpause.no_gc`): a table of 4,096 servers is a few hundred thousand
    acyclic objects, and the collector's passes over them cost about a tenth of the time.  On
    the way out the objects made meanwhile go to the permanent generation (``gc.freeze``), so
    re-enabling the collector does not start a pass over them; reference counting still frees
    everything.  The signature is kept (``functools.wraps``) for typer."""

    @functools.wraps(command)
    def paused(*args: Any, **kwargs: Any) -> Any:
        with no_gc():
            return command(*args, **kwargs)

    return paused  # type: ignore[return-value]  # functools.wraps keeps command's signature; mypy sees a _Wrapped


def _load_inventory(hosts: Optional[str], host_list: Optional[str]) -> Any:
    """The unfiltered inventory from ``--hosts FILE`` or ``-H LIST`` (exactly one of them)."""
    from launcher.planning.inventory.hostarg import parse_host_list
    from launcher.planning.inventory.sources import read_hosts_arg

    if hosts and host_list:
        raise RankTableError("give either --hosts FILE or -H LIST, not both", field="--hosts")
    if hosts:
        # a hostlist (--hosts "$SLURM_JOB_NODELIST") names Ascend servers: 8 devices unless host:N
        return read_hosts_arg(hosts, default_slots=8)
    if host_list:
        return parse_host_list(host_list)
    raise RankTableError("pass --hosts FILE (hostfile or cluster YAML) or -H h1:8,h2:8", field="--hosts")


def _hccn_files(pairs: List[str], all_hosts: List[str], kept: List[str]) -> Dict[str, str]:
    """``--hccn HOST=PATH`` values as a mapping, restricted to the hosts left after filters."""
    out: Dict[str, str] = {}
    for text in pairs:
        host, sep, path = text.partition("=")
        host, path = host.strip(), path.strip()
        if not sep or not host or not path:
            raise RankTableError(f"expected HOST=PATH, got {text!r}", field="--hccn")
        if host not in all_hosts:
            raise RankTableError(f"host {host!r} is not in the inventory ({', '.join(all_hosts)})", field="--hccn")
        if host in out:
            raise RankTableError(f"host {host!r} is given twice", field="--hccn")
        out[host] = path
    return {h: p for h, p in out.items() if h in kept}


def _emit(text: str, output: Optional[str], table: Any) -> None:
    """Write ``text`` to stdout, or atomically to ``output`` (a folder gets the default name)."""
    if output is None:
        sys.stdout.write(text)
        return
    from launcher.jobs.files import write_atomic
    from launcher.planning.ranktable import default_table_name

    if os.path.isdir(output):
        output = os.path.join(output, default_table_name(table))
    write_atomic(output, text)
    sys.stderr.write(f"wrote {output}\n")


@app.command("gen")
@with_ssh_settings("config", "accept_new", "connect_timeout", when="--collect", panel=None)
@_gc_paused
def gen(
    hosts: Optional[str] = typer.Option(
        None,
        "--hosts",
        "--hostfile",
        "-f",
        help="Hostfile, YAML cluster file, or a Slurm hostlist (node[01-04], 8 devices each unless node[01-04]:N).",
    ),
    host_list: Optional[str] = typer.Option(
        None, "-H", "--host", help="Hosts as h1:8,h2:8 or node[1-4]:8 (instead of --hosts)."
    ),
    hccn_dir: Optional[str] = typer.Option(
        None, "--hccn-dir", help="Folder of hccn.conf copies named <host> or <host>.conf."
    ),
    hccn: List[str] = typer.Option(
        [], "--hccn", help="HOST=PATH: that host's hccn.conf copy (repeatable; wins over everything else)."
    ),
    version: str = typer.Option("1.0", "--version", help=_VERSION_HELP),
    chip: str = typer.Option("910", "--chip", help=_CHIP_HELP),
    include: Optional[str] = typer.Option(None, "--include", help="Only these hosts/devices: host1:0,1@host2."),
    exclude: Optional[str] = typer.Option(None, "--exclude", help="Not these hosts/devices: host1:7@host3."),
    output: Optional[str] = typer.Option(
        None, "-o", "--output", help="Write here atomically (a folder gets hccl_tools.py's name) instead of stdout."
    ),
    collect: bool = typer.Option(
        False, "--collect", help="Read every host's hccn.conf over SSH, in parallel (--hccn still wins)."
    ),
    hccn_path: str = typer.Option(
        "/etc/hccn.conf", "--hccn-path", help="With --collect: the file to read on each host."
    ),
    *,
    ssh: SSHSettings,
) -> None:
    """Generate the rank table of an inventory, with device IPs from hccn.conf copies or the YAML.

    With --collect, each host's --hccn-path (default /etc/hccn.conf) is read over SSH instead.

    Device IPs per host, first match wins: --hccn HOST=PATH, the YAML hccn_conf, <hccn-dir>/<host>
    or <hccn-dir>/<host>.conf, the YAML device_ips.  Servers are sorted by server_id (string
    order) and ranks follow that order.  The table is validated before anything is written.
    """
    from launcher.planning.inventory.filters import apply_filters
    from launcher.planning.ranktable import (
        build_rank_table,
        check_rank_table,
        rank_table_json,
        resolve_device_ips,
    )

    full = _load_inventory(hosts, host_list)
    inventory = apply_filters(full, include, exclude)
    files = _hccn_files(hccn, [h.name for h in full.hosts], [h.name for h in inventory.hosts])
    read = None
    if collect:
        from launcher.execution.ssh.collect import collect_files
        from launcher.planning.ranktable.hccn import parse_hccn_conf, read_hccn_conf

        wanted = [h for h in inventory.hosts if h.name not in files]
        texts = collect_files(wanted, hccn_path, ssh)
        collected = {
            f"{name}:{hccn_path}": parse_hccn_conf(text, path=f"{name}:{hccn_path}") for name, text in texts.items()
        }
        files.update({name: f"{name}:{hccn_path}" for name in texts})
        read = lambda path: collected[path] if path in collected else read_hccn_conf(path)  # noqa: E731  (a one-line local helper)
    if read is None:
        device_ips = resolve_device_ips(inventory, hccn_dir=hccn_dir, hccn_files=files)
    else:
        device_ips = resolve_device_ips(inventory, hccn_dir=hccn_dir, hccn_files=files, read=read)
    table = build_rank_table(inventory, device_ips, version=version)
    check_rank_table(table, chip=chip, what="generated rank table")
    _emit(rank_table_json(table), output, table)


@app.command("merge")
@_gc_paused
def merge(
    files: List[str] = typer.Argument(..., help="Per-host rank tables (any order).", metavar="TABLE.json..."),
    chip: str = typer.Option("910", "--chip", help=_CHIP_HELP),
    output: Optional[str] = typer.Option(
        None, "-o", "--output", help="Write here atomically (a folder gets the default name) instead of stdout."
    ),
) -> None:
    """Merge per-host rank tables into one: servers sorted by server_id, ranks renumbered, validated."""
    from launcher.planning.ranktable import merge_rank_tables, rank_table_json, read_rank_table

    tables = [(path, read_rank_table(path)) for path in files]
    merged = merge_rank_tables(tables, chip=chip)
    _emit(rank_table_json(merged), output, merged)


@app.command("validate")
@_gc_paused
def validate(
    file: str = typer.Argument(..., help="The rank table JSON file.", metavar="FILE"),
    chip: str = typer.Option("910", "--chip", help=_CHIP_HELP),
) -> None:
    """Check a rank table; print `OK: N servers, M ranks`, or every problem and exit 1.

    Invalid JSON or an unreadable file is bad input (exit 2, `mslaunch: error: FILE:LINE:COL: ...`).
    """
    from launcher.planning.ranktable import read_rank_table, table_size, validate_rank_table

    table = read_rank_table(file)
    problems = validate_rank_table(table, chip=chip)
    if problems:
        sys.stderr.write("".join(f"{file}: {p.json_path}: {p.message}\n" for p in problems))
        raise typer.Exit(code=1)
    servers, ranks = table_size(table)
    sys.stdout.write(f"OK: {servers} server{'s' if servers != 1 else ''}, {ranks} rank{'s' if ranks != 1 else ''}\n")


#: ``show`` lists every server of tables up to this size; bigger ones show a summary and the
#: first and last :data:`SHOW_EDGE` servers unless ``--all`` is given.
SHOW_SERVERS_OVER = 16
SHOW_EDGE = 4
#: Tables of more rows than this are drawn by :func:`_plain_table` even on a terminal (rich
#: lays out a few thousand rows a second).
RICH_ROWS = 2000


@app.command("show")
@_gc_paused
def show(
    file: str = typer.Argument(..., help="The rank table JSON file.", metavar="FILE"),
    show_all: bool = typer.Option(
        False, "--all", help="Every server of a big table (else a summary and the first/last ones)."
    ),
) -> None:
    """Print a rank table as a table: server, device, device IP, rank (and host IP / SuperPoD for 1.2).

    Tables of more than 16 servers print a summary line and the first and last 4 servers unless
    --all is given.
    """
    from launcher.planning.ranktable import read_rank_table, table_size

    table = read_rank_table(file)
    servers = table.get("server_list") if isinstance(table, dict) else None
    if not isinstance(servers, list):
        raise RankTableError("no server_list; is this a rank table? (try: mslaunch ranktable validate)", path=file)
    v12 = table.get("version") == "1.2"
    pods = _super_pods(table) if v12 else {}
    n_servers, n_devices = table_size(table)
    head = [
        f"{file}: version {_text(table.get('version'))}, status {_text(table.get('status'))}, "
        f"{n_servers} servers, {n_devices} devices"
    ]
    groups = _device_rows(servers, v12, pods)
    hidden = 0
    if not show_all and len(groups) > SHOW_SERVERS_OVER:
        head.append(_summary(groups, pods))
        hidden = len(groups) - 2 * SHOW_EDGE
        hidden_devices = sum(len(g) for g in groups[SHOW_EDGE:-SHOW_EDGE])
        groups = groups[:SHOW_EDGE] + [[["⋮"] * len(_columns(v12))]] + groups[-SHOW_EDGE:]
    rows = sum(len(g) for g in groups)
    tty = sys.stdout.isatty()
    if tty and rows <= RICH_ROWS:
        _print_rich(head, groups, v12)
    else:
        sys.stdout.write("\n".join(head) + "\n" + _plain_table(_columns(v12), groups))
    if hidden:
        sys.stdout.write(
            f"... {hidden} servers ({hidden_devices} devices) not shown: mslaunch ranktable show --all {file}\n"
        )


def _columns(v12: bool) -> List[Tuple[str, str]]:
    """``(header, justify)`` of the device table's columns."""
    cols = [("server", "left")]
    if v12:
        cols += [("host IP", "left"), ("SuperPoD", "left")]
    cols += [("device", "right"), ("device IP", "left")]
    if v12:
        cols.append(("super device", "right"))
    cols.append(("rank", "right"))
    return cols


_CONTROL_RE = re.compile("[\x00-\x1f\x7f-\x9f]")


def _text(value: Any) -> str:
    """A cell's text (None: empty); control characters shown escaped (``\\x1b``), never sent
    to the terminal."""
    text = "" if value is None else str(value)
    return _CONTROL_RE.sub(lambda m: repr(m.group())[1:-1], text) if _CONTROL_RE.search(text) else text


def _device_rows(servers: List[Any], v12: bool, pods: Dict[str, str]) -> List[List[List[str]]]:
    """One group of rows per server, one row of cell texts per device; malformed entries are
    skipped (``validate`` reports them), servers without devices give no group."""
    groups: List[List[List[str]]] = []
    for server in servers:
        if not isinstance(server, dict):
            continue
        sid = _text(server.get("server_id"))
        raw_devices = server.get("device")
        devices: List[Any] = raw_devices if isinstance(raw_devices, list) else []
        rows: List[List[str]] = []
        for dev in devices:
            if not isinstance(dev, dict):
                continue
            row = [sid]
            if v12:
                row += [_text(server.get("host_ip")), _text(pods.get(sid))]
            row += [_text(dev.get("device_id")), _text(dev.get("device_ip"))]
            if v12:
                row.append(_text(dev.get("super_device_id")))
            row.append(_text(dev.get("rank_id")))
            rows.append(row)
        if rows:
            groups.append(rows)
    return groups


def _summary(groups: List[List[List[str]]], pods: Dict[str, str]) -> str:
    """One line: the rank range, devices per server (how many servers have each count), SuperPoDs."""
    ranks = [int(row[-1]) for rows in groups for row in rows if row[-1].isdigit()]
    per_server: Dict[int, int] = {}
    for rows in groups:
        per_server[len(rows)] = per_server.get(len(rows), 0) + 1
    counts = ", ".join(f"{n} on {k} server{'s' if k != 1 else ''}" for n, k in sorted(per_server.items()))
    text = (
        f"ranks {min(ranks)}..{max(ranks)}; devices per server: {counts}" if ranks else f"devices per server: {counts}"
    )
    if pods:
        text += f"; {len(set(pods.values()))} SuperPoDs"
    return text


def _plain_table(columns: List[Tuple[str, str]], groups: List[List[List[str]]]) -> str:
    """The device table drawn as rich draws it (heavy-head box, a rule between groups), in one
    pass over the rows: what ``show`` prints for big tables and when not on a terminal."""
    from rich.cells import cell_len

    widths = [cell_len(h) for h, _ in columns]
    for rows in groups:
        for row in rows:
            for i, cell in enumerate(row):
                n = cell_len(cell) if not cell.isascii() else len(cell)
                if n > widths[i]:
                    widths[i] = n
    right = [j == "right" for _, j in columns]

    def line(cells: List[str], bar: str) -> str:
        out = []
        for cell, width, r in zip(cells, widths, right):
            pad = " " * (width - (len(cell) if cell.isascii() else cell_len(cell)))
            out.append(f" {pad}{cell} " if r else f" {cell}{pad} ")
        return bar + bar.join(out) + bar + "\n"

    def rule(left: str, mid: str, end: str, fill: str) -> str:
        return left + mid.join(fill * (w + 2) for w in widths) + end + "\n"

    parts = [rule("┏", "┳", "┓", "━"), line([h for h, _ in columns], "┃"), rule("┡", "╇", "┩", "━")]
    between = rule("├", "┼", "┤", "─")
    for k, rows in enumerate(groups):
        if k:
            parts.append(between)
        parts.extend(line(row, "│") for row in rows)
    parts.append(rule("└", "┴", "┘", "─"))
    return "".join(parts)


def _print_rich(head: List[str], groups: List[List[List[str]]], v12: bool) -> None:
    """The header lines and the device table through rich (terminals: styled, fitted to the width)."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(highlight=False)
    for line in head:
        console.print(Text(line), soft_wrap=True)
    out = Table()
    for header, justify in _columns(v12):
        out.add_column(header, justify=justify)  # type: ignore[arg-type]  # _columns gives rich's justify values, typed str
    for rows in groups:
        for i, row in enumerate(rows):
            out.add_row(*(Text(c) for c in row), end_section=i == len(rows) - 1)
    console.print(out)


def _super_pods(table: Dict[str, Any]) -> Dict[str, str]:
    """server id -> SuperPoD id from a 1.2 table's ``super_pod_list`` (for display only)."""
    pods: Dict[str, str] = {}
    if isinstance(table.get("super_pod_list"), list):
        for pod in table["super_pod_list"]:
            if isinstance(pod, dict) and isinstance(pod.get("server_list"), list):
                for member in pod["server_list"]:
                    if isinstance(member, dict):
                        pods.setdefault(str(member.get("server_id")), str(pod.get("super_pod_id")))
    return pods
