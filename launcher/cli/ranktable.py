"""``mslaunch ranktable``: generate, merge, validate and show HCCL rank tables.

Exit codes: 0 success; 1 ``validate`` found problems (each printed as ``FILE: json.path: message``
on stderr); 2 bad input (unreadable or invalid-JSON rank table, bad hostfile / hccn.conf, bad
flag), reported by :func:`launcher.cli.app.main` as ``mslaunch: error: <where>: <message>``.

Only ``show`` imports rich; ``gen`` stays on a lean import path (its start-up is benchmarked in
``bench/bench_ranktable.py``).
"""
from __future__ import annotations

import os
import sys
from typing import Any, Dict, List, Optional

import typer

from launcher.cli.ssh_flags import with_ssh_settings
from launcher.errors import RankTableError
from launcher.execution.ssh.settings import SSHSettings

app = typer.Typer(
    help="HCCL rank tables (Ascend): generate from an inventory, merge per-host tables, validate, show.",
    no_args_is_help=True,
    context_settings={"help_option_names": ["-h", "--help"]},
)

_VERSION_HELP = "Rank table version: 1.0 (Ascend 910/910B) or 1.2 (Atlas A3 SuperPoD)."
_CHIP_HELP = (
    "Device rules to check: 910 (1, 2, 4 or 8 devices per server; 8 when multi-server) or 910b (1-8). "
    "Version 1.2 (Atlas A3) tables take 1-16 devices per server with either."
)


def _load_inventory(hosts: Optional[str], host_list: Optional[str]) -> Any:
    """The unfiltered inventory from ``--hosts FILE`` or ``-H LIST`` (exactly one of them)."""
    from launcher.planning.inventory import parse_host_list, read_inventory

    if hosts and host_list:
        raise RankTableError("give either --hosts FILE or -H LIST, not both", field="--hosts")
    if hosts:
        return read_inventory(hosts)
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
            raise RankTableError(
                f"host {host!r} is not in the inventory ({', '.join(all_hosts)})", field="--hccn"
            )
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
def gen(
    hosts: Optional[str] = typer.Option(None, "--hosts", "--hostfile", "-f", help="Hostfile or YAML cluster file."),
    host_list: Optional[str] = typer.Option(None, "-H", "--host", help="Hosts as h1:8,h2:8 (instead of --hosts)."),
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
    hccn_path: str = typer.Option("/etc/hccn.conf", "--hccn-path", help="With --collect: the file to read on each host."),
    *,
    ssh: SSHSettings,
) -> None:
    """Generate the rank table of an inventory, with device IPs from hccn.conf copies or the YAML.

    With --collect, each host's --hccn-path (default /etc/hccn.conf) is read over SSH instead.

    Device IPs per host, first match wins: --hccn HOST=PATH, the YAML hccn_conf, <hccn-dir>/<host>
    or <hccn-dir>/<host>.conf, the YAML device_ips.  Servers are sorted by server_id (string
    order) and ranks follow that order.  The table is validated before anything is written.
    """
    from launcher.planning.inventory import apply_filters
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
        from launcher.execution.ssh import collect_files
        from launcher.planning.hccn import parse_hccn_conf, read_hccn_conf

        wanted = [h for h in inventory.hosts if h.name not in files]
        texts = collect_files(wanted, hccn_path, ssh)
        collected = {f"{name}:{hccn_path}": parse_hccn_conf(text, path=f"{name}:{hccn_path}") for name, text in texts.items()}
        files.update({name: f"{name}:{hccn_path}" for name in texts})
        read = lambda path: collected[path] if path in collected else read_hccn_conf(path)  # noqa: E731
    if read is None:
        device_ips = resolve_device_ips(inventory, hccn_dir=hccn_dir, hccn_files=files)
    else:
        device_ips = resolve_device_ips(inventory, hccn_dir=hccn_dir, hccn_files=files, read=read)
    table = build_rank_table(inventory, device_ips, version=version)
    check_rank_table(table, chip=chip, what="generated rank table")
    _emit(rank_table_json(table), output, table)


@app.command("merge")
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


@app.command("show")
def show(
    file: str = typer.Argument(..., help="The rank table JSON file.", metavar="FILE"),
) -> None:
    """Print a rank table as a table: server, device, device IP, rank (and host IP / SuperPoD for 1.2)."""
    from rich.console import Console
    from rich.text import Text

    from launcher.planning.ranktable import read_rank_table, table_size

    table = read_rank_table(file)
    servers = table.get("server_list") if isinstance(table, dict) else None
    if not isinstance(servers, list):
        raise RankTableError("no server_list; is this a rank table? (try: mslaunch ranktable validate)", path=file)
    v12 = table.get("version") == "1.2"
    out = _devices_table(servers, v12, _super_pods(table) if v12 else {})
    # Not a terminal (a pipe, a file): do not squeeze the table into 80 columns.
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 200)
    n_servers, n_devices = table_size(table)
    console.print(
        Text(
            f"{file}: version {_cell(table.get('version'))}, status {_cell(table.get('status'))}, "
            f"{n_servers} servers, {n_devices} devices"
        ),
        soft_wrap=True,
    )
    console.print(out)


def _cell(value: Any) -> Any:
    """A table cell showing ``value`` as plain text (None: empty; never read as markup)."""
    from rich.text import Text

    return Text("" if value is None else str(value))


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


def _devices_table(servers: List[Any], v12: bool, pods: Dict[str, str]) -> Any:
    """The rich table of ``show``: one row per device, one section per server; malformed
    entries are skipped (``validate`` reports them)."""
    from rich.table import Table
    from rich.text import Text

    out = Table()
    out.add_column("server")
    if v12:
        out.add_column("host IP")
        out.add_column("SuperPoD")
    out.add_column("device", justify="right")
    out.add_column("device IP")
    if v12:
        out.add_column("super device", justify="right")
    out.add_column("rank", justify="right")
    for server in servers:
        if not isinstance(server, dict):
            continue
        sid = "" if server.get("server_id") is None else str(server.get("server_id"))
        raw_devices = server.get("device")
        devices: List[Any] = raw_devices if isinstance(raw_devices, list) else []
        for dev in devices:
            if not isinstance(dev, dict):
                continue
            row = [Text(sid)]
            if v12:
                row += [_cell(server.get("host_ip")), _cell(pods.get(sid))]
            row += [_cell(dev.get("device_id")), _cell(dev.get("device_ip"))]
            if v12:
                row.append(_cell(dev.get("super_device_id")))
            row.append(_cell(dev.get("rank_id")))
            out.add_row(*row, end_section=dev is devices[-1])
    return out
