"""``mslaunch plan`` on big plans: a summary by default, every process with ``--all``, complete JSON."""

from __future__ import annotations

import json
import os
import shlex
from typing import Any, Dict, List

from tests.harness.cli import run_cli

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def plan_stdout(*args: str, cwd: str) -> str:
    """``mslaunch ARGS``'s standard output, which must succeed (plan starts nothing: in this process)."""
    r = run_cli(*args, cwd=cwd)
    assert r.returncode == 0, r.stderr
    return r.stdout


def blocks(text: str) -> List[str]:
    """The first line of every process block."""
    return [line for line in text.splitlines() if line.startswith(("rank ", "scheduler  "))]


def expected_block(p: Dict[str, Any], name: str) -> List[str]:
    where = f"host={p['host']}"
    if "rank" in p:
        where += f" rank={p['rank']} local_rank={p['local_rank']} node_rank={p['node_rank']} device_id={p['device_id']}"
    return [
        f"{name}  {where}",
        f"  cwd:  {p['cwd']}",
        f"  argv: {' '.join(shlex.quote(a) for a in p['argv'])}",
        f"  env:  {' '.join(f'{k}={shlex.quote(v)}' for k, v in p['env'].items())}",
        f"  log:  {p['log']}",
    ]


def test_big_plan_summary_all_and_json(tmp_path) -> None:
    hosts = ",".join(f"n{i}:8" for i in range(10))  # 80 ranks + the scheduler
    common = ["-H", hosts, "--job-id", "big", "--", "train.py", "--lr", "0.1 x"]
    full = json.loads(plan_stdout("plan", "--json", *common, cwd=str(tmp_path)))
    assert full["world_size"] == 80 and len(full["ranks"]) == 80
    assert [r["rank"] for r in full["ranks"]] == list(range(80))

    summary = plan_stdout("plan", *common, cwd=str(tmp_path))
    assert blocks(summary) == ["scheduler  host=n0"] + [b for b in blocks(summary) if b.startswith("rank ")]
    shown = [int(b.split()[1]) for b in blocks(summary) if b.startswith("rank ")]
    assert shown == list(range(7)) + list(range(72, 80))
    assert "... 65 processes not shown (mslaunch plan --all, or --json)" in summary.splitlines()
    assert "hosts=n0,n1,n2,n3,n4,n5,n6,n7,n8,n9" in summary.splitlines()[0]

    every = plan_stdout("plan", "--all", *common, cwd=str(tmp_path)).splitlines()
    want = expected_block(full["scheduler"], "scheduler")
    for r in full["ranks"]:
        want += expected_block(r, f"rank {r['rank']}")
    start = every.index("scheduler  host=n0")
    assert every[start : start + len(want)] == want
    assert "not shown" not in "\n".join(every)


def test_small_plan_is_printed_whole(tmp_path) -> None:
    out = plan_stdout("plan", "-H", "a:8,b:8", "--job-id", "small", "--", "train.py", cwd=str(tmp_path))
    assert len(blocks(out)) == 17 and "not shown" not in out


def test_dry_run_json_is_the_plan_json(tmp_path) -> None:
    args = ["-H", "a:2,b:2", "--job-id", "same", "--", "train.py"]
    (tmp_path / "train.py").write_text("")  # run checks that the script exists
    plan = plan_stdout("plan", "--json", *args, cwd=str(tmp_path))
    dry = plan_stdout("run", "--dry-run", "--json", *args, cwd=str(tmp_path))
    assert plan == dry == json.dumps(json.loads(plan), indent=2) + "\n"


def test_plan_shows_the_hostfile_ssh_user_and_port(tmp_path) -> None:
    (tmp_path / "hosts").write_text("n1 slots = 1 username=bob port=2222\nalice@n2 port= 2200\nn3\n")
    text = plan_stdout("plan", "--hosts", "hosts", "--launcher", "ssh", "--", "python", "-c", "pass", cwd=str(tmp_path))
    assert [line for line in text.splitlines() if line.startswith("ssh ")] == [
        "ssh n1: user=bob port=2222",
        "ssh n2: user=alice port=2200",
    ]
    plan = json.loads(
        plan_stdout("plan", "--hosts", "hosts", "--json", "--", "python", "-c", "pass", cwd=str(tmp_path))
    )
    assert plan["host_ssh"] == {"n1": {"user": "bob", "port": 2222}, "n2": {"user": "alice", "port": 2200}}
    mpi = json.loads(
        plan_stdout(
            "plan", "--hosts", "hosts", "--json", "--method", "mpi", "--", "python", "-c", "pass", cwd=str(tmp_path)
        )
    )
    argv = mpi["mpirun"]
    agent = argv[argv.index("plm_rsh_agent") + 1]
    assert agent.startswith("ssh -F ") and agent.endswith("/ssh_config -o BatchMode=yes")
    from launcher.planning.backends.mpirun import rsh_agent
    from launcher.planning.inventory.sources import read_inventory

    _, config = rsh_agent(read_inventory(str(tmp_path / "hosts")).hosts, None, "/j/ssh_config")  # what that file holds
    assert config is not None and config.splitlines()[1:] == [
        "Host n1",
        "    User bob",
        "    Port 2222",
        "Host n2",
        "    User alice",
        "    Port 2200",
    ]
