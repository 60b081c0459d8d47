"""``mslaunch ranktable`` end to end, as a real process (``python -m launcher ranktable ...``)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import List, Optional, Tuple

import pytest

from tests.harness.cli import imported_by, run_cli

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "tests", "data")
HCCN = os.path.join(DATA, "hccn")
HOSTS = os.path.join(DATA, "hosts_2x8")
GOLDEN8 = os.path.join(DATA, "golden", "rank_table_8pcs.json")
GOLDEN16 = os.path.join(DATA, "golden", "rank_table_16pcs.json")


def read(path: str) -> str:
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def ranktable(*args: str, cwd: Optional[str] = None) -> subprocess.CompletedProcess:
    """``mslaunch ranktable ARGS`` (in this process: see :mod:`tests.harness.cli`)."""
    return run_cli("ranktable", *args, env=dict(os.environ, COLUMNS="200"), cwd=cwd or ROOT)


def lines(text: str) -> List[str]:
    return text.splitlines()


# --------------------------------------------------------------------------------------------
# gen


def test_gen_16_to_stdout() -> None:
    r = ranktable("gen", "--hosts", HOSTS, "--hccn-dir", HCCN)
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout == read(GOLDEN16)


def test_gen_8_with_host_list() -> None:
    r = ranktable("gen", "-H", "10.0.0.1:8", "--hccn-dir", HCCN)
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout == read(GOLDEN8)


def test_gen_with_hccn_files() -> None:
    r = ranktable(
        "gen",
        "-H",
        "10.0.0.2:8,10.0.0.1:8",
        "--hccn",
        f"10.0.0.1={HCCN}/10.0.0.1.conf",
        "--hccn",
        f"10.0.0.2={HCCN}/10.0.0.2.conf",
    )
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout == read(GOLDEN16)


def test_gen_include_and_exclude() -> None:
    r = ranktable("gen", "--hosts", HOSTS, "--hccn-dir", HCCN, "--include", "10.0.0.1")
    assert (r.returncode, r.stderr, r.stdout) == (0, "", read(GOLDEN8))
    # An --hccn for a host the filters drop is not read.
    r = ranktable(
        "gen", "--hosts", HOSTS, "--hccn-dir", HCCN, "--exclude", "10.0.0.2", "--hccn", "10.0.0.2=/nonexistent"
    )
    assert (r.returncode, r.stderr, r.stdout) == (0, "", read(GOLDEN8))
    r = ranktable("gen", "--hosts", HOSTS, "--hccn-dir", HCCN, "--include", "10.0.0.1:0,1,2,3", "--chip", "910b")
    assert r.returncode == 0, r.stderr
    table = json.loads(r.stdout)
    assert [(d["device_id"], d["rank_id"]) for d in table["server_list"][0]["device"]] == [
        ("0", "0"),
        ("1", "1"),
        ("2", "2"),
        ("3", "3"),
    ]


def test_gen_to_file_and_folder(tmp_path) -> None:
    out = tmp_path / "rt.json"
    r = ranktable("gen", "--hosts", HOSTS, "--hccn-dir", HCCN, "-o", str(out))
    assert (r.returncode, r.stdout, r.stderr) == (0, "", f"wrote {out}\n")
    assert read(str(out)) == read(GOLDEN16)
    assert sorted(os.listdir(tmp_path)) == ["rt.json"]  # no temporary file left behind

    r = ranktable("gen", "-H", "10.0.0.1:8", "--hccn-dir", HCCN, "-o", str(tmp_path))
    named = tmp_path / "hccl_8p_01234567_10.0.0.1.json"
    assert (r.returncode, r.stdout, r.stderr) == (0, "", f"wrote {named}\n")
    assert read(str(named)) == read(GOLDEN8)


def test_gen_v12_from_yaml() -> None:
    r = ranktable("gen", "--hosts", os.path.join(ROOT, "hostfiles", "a3_superpod.yaml"), "--version", "1.2")
    assert (r.returncode, r.stderr) == (0, "")
    table = json.loads(r.stdout)
    assert table["version"] == "1.2"
    assert table["super_pod_list"] == [
        {"super_pod_id": "0", "server_list": [{"server_id": "node0"}, {"server_id": "node1"}]},
        {"super_pod_id": "1", "server_list": [{"server_id": "node2"}, {"server_id": "node3"}]},
    ]


def test_bad_hccn_line_fails_cleanly_and_writes_nothing(tmp_path) -> None:
    hccn = tmp_path / "hccn"
    shutil.copytree(HCCN, hccn)
    bad = hccn / "10.0.0.2.conf"
    text = read(str(bad)).replace("address_5=192.2.27.9", "address_5=192.2.27")
    bad.write_bytes(text.encode("utf-8"))
    out = tmp_path / "out.json"
    r = ranktable("gen", "--hosts", HOSTS, "--hccn-dir", str(hccn), "-o", str(out))
    assert r.returncode == 2
    assert r.stdout == ""
    assert lines(r.stderr) == [
        f"mslaunch: error: {bad}:17: address_5: '192.2.27' is not an IPv4 address; write it as "
        "address_<device_id>=<IPv4>, e.g. address_0=192.1.27.6 (hccn_tool -i <id> -ip -g prints it)"
    ]
    assert "Traceback" not in r.stderr
    assert sorted(os.listdir(tmp_path)) == ["hccn"]  # -o OUT not created, no temp file


def test_failed_gen_leaves_an_existing_output_alone(tmp_path) -> None:
    out = tmp_path / "out.json"
    out.write_text("old\n")
    r = ranktable("gen", "-H", "10.0.0.1:8,10.0.0.2:4", "--hccn-dir", HCCN, "-o", str(out))
    assert r.returncode == 2
    assert lines(r.stderr) == [
        "mslaunch: error: the generated rank table is invalid: server_list[1].device: a multi-server Ascend 910 "
        "job needs 8 devices on every server, got 4 (--chip 910b allows 1-8)"
    ]
    assert read(str(out)) == "old\n"
    assert sorted(os.listdir(tmp_path)) == ["out.json"]


@pytest.mark.parametrize(
    "args, stderr",
    [
        (
            ["gen", "--hccn-dir", HCCN],
            "mslaunch: error: --hosts: pass --hosts FILE (hostfile or cluster YAML) or -H h1:8,h2:8",
        ),
        (
            ["gen", "--hosts", HOSTS, "-H", "a:1"],
            "mslaunch: error: --hosts: give either --hosts FILE or -H LIST, not both",
        ),
        (
            ["gen", "-H", "10.0.0.1:8", "--hccn", "10.0.0.9=/x"],
            "mslaunch: error: --hccn: host '10.0.0.9' is not in the inventory (10.0.0.1)",
        ),
        (
            ["gen", "-H", "10.0.0.1:8", "--hccn", "10.0.0.1"],
            "mslaunch: error: --hccn: expected HOST=PATH, got '10.0.0.1'",
        ),
        (
            ["gen", "-H", "10.0.0.1:8", "--hccn-dir", HCCN, "--version", "2"],
            "mslaunch: error: --version: unknown rank table version '2'; use 1.0 (Ascend 910/910B) or 1.2 (Atlas A3 "
            "SuperPoD)",
        ),
        (
            ["gen", "-H", "10.0.0.1:8", "--hccn-dir", HCCN, "--chip", "310"],
            "mslaunch: error: --chip: unknown chip '310'; use one of 910, 910b",
        ),
        (
            ["gen", "-H", "10.0.0.3:8", "--hccn-dir", HCCN],
            f"mslaunch: error: -H entry 1: host '10.0.0.3' has no device IPs (looked for {HCCN}/10.0.0.3 and "
            f"{HCCN}/10.0.0.3.conf); pass --hccn 10.0.0.3=PATH or --hccn-dir DIR holding DIR/10.0.0.3.conf, "
            "or give it 'hccn_conf:' or 'device_ips:' in a YAML cluster file",
        ),
        (
            ["gen", "--hosts", "/nonexistent/hosts"],
            "mslaunch: error: /nonexistent/hosts: no such file; pass an existing hostfile or cluster YAML",
        ),
    ],
)
def test_gen_input_errors(args: List[str], stderr: str) -> None:
    r = ranktable(*args)
    assert (r.returncode, r.stdout, lines(r.stderr)) == (2, "", [stderr])


# --------------------------------------------------------------------------------------------
# merge


@pytest.fixture
def singles(tmp_path) -> List[str]:
    paths = []
    for n in (1, 2):
        r = ranktable("gen", "-H", f"10.0.0.{n}:8", "--hccn-dir", HCCN)
        assert r.returncode == 0, r.stderr
        path = tmp_path / f"hccl_10.0.0.{n}.json"
        path.write_text(r.stdout)
        paths.append(str(path))
    return paths


def test_merge_equals_gen(singles: List[str], tmp_path) -> None:
    for order in (singles, list(reversed(singles))):
        r = ranktable("merge", *order)
        assert (r.returncode, r.stderr, r.stdout) == (0, "", read(GOLDEN16))
    out = tmp_path / "merged.json"
    r = ranktable("merge", singles[1], singles[0], "-o", str(out))
    assert (r.returncode, r.stdout, r.stderr) == (0, "", f"wrote {out}\n")
    assert read(str(out)) == read(GOLDEN16)


def test_merge_duplicate_server(singles: List[str]) -> None:
    r = ranktable("merge", singles[0], singles[0])
    assert (r.returncode, r.stdout) == (2, "")
    assert lines(r.stderr) == [
        f"mslaunch: error: {singles[0]}: server_list[0].server_id: server_id '10.0.0.1' is in both "
        f"{singles[0]} and {singles[0]}; each server belongs in one table"
    ]


def test_merge_invalid_json(singles: List[str], tmp_path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{\n  "version": "1.0",\n  "server_list": [}\n')
    r = ranktable("merge", singles[0], str(bad))
    assert (r.returncode, r.stdout, lines(r.stderr)) == (
        2,
        "",
        [f"mslaunch: error: {bad}:3:19: invalid JSON: Expecting value"],
    )


# --------------------------------------------------------------------------------------------
# validate and show


def test_validate_ok() -> None:
    r = ranktable("validate", GOLDEN16)
    assert (r.returncode, r.stdout, r.stderr) == (0, "OK: 2 servers, 16 ranks\n", "")
    r = ranktable("validate", GOLDEN8, "--chip", "910b")
    assert (r.returncode, r.stdout, r.stderr) == (0, "OK: 1 server, 8 ranks\n", "")


def test_validate_reports_every_problem(tmp_path) -> None:
    table = json.loads(read(GOLDEN16))
    table["server_count"] = 2
    table["server_list"][1]["device"][3]["device_ip"] = "192.4.27.800"
    table["server_list"].reverse()
    path = tmp_path / "t.json"
    path.write_text(json.dumps(table))
    r = ranktable("validate", str(path))
    assert (r.returncode, r.stdout) == (1, "")
    assert lines(r.stderr) == [
        f'{path}: server_count: must be a JSON string, got number 2 (write "2")',
        f"{path}: server_list[0].device[3].device_ip: '192.4.27.800' is not an IPv4 address",
        f"{path}: server_list[0].device[0].rank_id: the first server's ranks must start at 0, got 8",
        f"{path}: server_list[1].device[0].rank_id: ranks must continue in server order: server_list[0] ends "
        "at 15, so this server starts at 16, got 0",
        f"{path}: server_list[1].server_id: servers must be in lexicographic order of server_id: '10.0.0.1' "
        "sorts before '10.0.0.2' (server_list[0])",
    ]


def test_validate_invalid_json_is_bad_input(tmp_path) -> None:
    path = tmp_path / "t.json"
    path.write_text('{"version": "1.0",\n "status": "completed"\n "x": 1}\n')
    r = ranktable("validate", str(path))
    assert (r.returncode, r.stdout, lines(r.stderr)) == (
        2,
        "",
        [f"mslaunch: error: {path}:3:2: invalid JSON: Expecting ',' delimiter"],
    )
    r = ranktable("validate", str(tmp_path / "missing.json"))
    assert (r.returncode, r.stdout, lines(r.stderr)) == (
        2,
        "",
        [f"mslaunch: error: {tmp_path / 'missing.json'}: no such rank table file"],
    )


def test_show() -> None:
    r = ranktable("show", GOLDEN16)
    assert (r.returncode, r.stderr) == (0, "")
    out = lines(r.stdout)
    assert out[0] == f"{GOLDEN16}: version 1.0, status completed, 2 servers, 16 devices"
    assert "┃ server   ┃ device ┃ device IP  ┃ rank ┃" in out
    assert "│ 10.0.0.1 │      0 │ 192.1.27.6 │    0 │" in out
    assert "│ 10.0.0.2 │      7 │ 192.4.27.9 │   15 │" in out
    assert len([line for line in out if line.startswith("│ 10.0.0.")]) == 16


def test_show_not_a_rank_table(tmp_path) -> None:
    path = tmp_path / "t.json"
    path.write_text("[1, 2]\n")
    r = ranktable("show", str(path))
    assert (r.returncode, r.stdout, lines(r.stderr)) == (
        2,
        "",
        [f"mslaunch: error: {path}: no server_list; is this a rank table? (try: mslaunch ranktable validate)"],
    )


def test_module_does_not_import_rich() -> None:
    code = "import sys, launcher.cli.ranktable; print(sorted(m for m in sys.modules if m.split('.')[0] == 'rich'))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert (r.returncode, r.stdout) == (0, "[]\n"), r.stderr


# --------------------------------------------------------------------------------------------
# show on big tables


def _table_file(tmp_path, servers: int, v12: bool = False) -> str:
    from tests.planning.ranktable.test_ranktable_scale import big_table

    path = tmp_path / "big.json"
    path.write_text(json.dumps(big_table(servers, 8, v12)))
    return str(path)


def test_show_big_table_summarises(tmp_path) -> None:
    path = _table_file(tmp_path, 40, v12=True)
    r = ranktable("show", path)
    assert (r.returncode, r.stderr) == (0, "")
    out = lines(r.stdout)
    assert out[0] == f"{path}: version 1.2, status completed, 40 servers, 320 devices"
    assert out[1] == "ranks 0..319; devices per server: 8 on 40 servers; 1 SuperPoDs"
    servers = [line.split()[1] for line in out if line.startswith("│ 10.")]
    assert len(servers) == 8 * 8
    firsts = sorted({s for s in servers})
    assert firsts == ["10.0.0.1", "10.0.1.1", "10.0.10.1", "10.0.11.1", "10.0.6.1", "10.0.7.1", "10.0.8.1", "10.0.9.1"]
    assert len([line for line in out if line.startswith("│ ⋮")]) == 1
    assert out[-1] == f"... 32 servers (256 devices) not shown: mslaunch ranktable show --all {path}"


def test_show_all_lists_every_device(tmp_path) -> None:
    path = _table_file(tmp_path, 40)
    out = lines(ranktable("show", "--all", path).stdout)
    rows = [line for line in out if line.startswith("│ 10.")]
    assert len(rows) == 320 and [int(row.split("│")[-2]) for row in rows] == list(range(320))
    assert not any("not shown" in line for line in out)


@pytest.mark.parametrize("v12", [False, True])
def test_plain_table_is_what_rich_draws(v12: bool) -> None:
    """The fast renderer of big tables draws the same characters as rich's table (small case)."""
    import io

    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from launcher.cli.ranktable import _columns, _device_rows, _plain_table, _super_pods
    from tests.planning.ranktable.test_ranktable_scale import big_table

    table = big_table(3, 8, v12)
    table["server_list"][1]["device"][0]["device_ip"] = "1.2.3.4-ü"  # wide/unusual text too
    pods = _super_pods(table) if v12 else {}
    groups = _device_rows(table["server_list"], v12, pods)
    rich_table = Table()
    for header, justify in _columns(v12):
        rich_table.add_column(header, justify=justify)
    for rows in groups:
        for i, row in enumerate(rows):
            rich_table.add_row(*(Text(c) for c in row), end_section=i == len(rows) - 1)
    buf = io.StringIO()
    Console(file=buf, width=200, highlight=False).print(rich_table)
    assert _plain_table(_columns(v12), groups) == buf.getvalue()


def test_show_escapes_control_characters(tmp_path) -> None:
    path = tmp_path / "t.json"
    table = json.loads(read(GOLDEN8))
    table["server_list"][0]["server_id"] = "a\x1b[31mb"
    path.write_text(json.dumps(table))
    r = ranktable("show", str(path))
    assert "\x1b" not in r.stdout and "a\\x1b[31mb" in r.stdout


# --------------------------------------------------------------------------------------------
# start-up: `mslaunch ranktable` does not build the other commands


def _via_full_app(*args: str) -> subprocess.CompletedProcess:
    """``mslaunch ranktable ARGS`` through the app that holds every command."""
    code = f"import sys; from launcher.cli.app import main; main(['ranktable', *{list(args)!r}])"
    env = dict(os.environ, COLUMNS="200", PYTHONPATH=ROOT)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, timeout=60)


@pytest.mark.parametrize(
    "args",
    [
        (),
        ("--help",),
        ("gen", "--help"),
        ("show", "-h"),
        ("bogus",),
        ("gen", "--bogus"),
        ("validate", "no-such-table.json"),
        ("gen", "-H", "n1:8", "--version", "2.0"),
    ],
    ids=["no-args", "help", "gen-help", "show-help", "unknown-command", "unknown-flag", "missing-file", "bad-version"],
)
def test_ranktable_alone_answers_as_the_full_app(args: Tuple[str, ...]) -> None:
    lean, full = ranktable(*args), _via_full_app(*args)
    assert (lean.returncode, lean.stdout, lean.stderr) == (full.returncode, full.stdout, full.stderr)
    assert lean.stdout or lean.stderr


def test_ranktable_does_not_import_the_other_commands(tmp_path) -> None:
    table = tmp_path / "t.json"
    table.write_text(read(os.path.join(ROOT, "tests", "data", "seed001_rank_table_8pcs.json")))
    r, modules = imported_by("ranktable", "validate", str(table))
    assert (r.returncode, r.stdout, r.stderr) == (0, "OK: 1 server, 8 ranks\n", "")
    heavy = (
        "launcher.cli.app",
        "launcher.cli.options",
        "launcher.cli.spec",
        "launcher.cli.run",
        "launcher.planning.build",
    )
    assert [m for m in modules if m.startswith(heavy)] == []
