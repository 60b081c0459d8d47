"""msrun drop-in: msrun's flags and per-node mode, at the planning and CLI layers (no processes).

MindSpore end to end (msrun beside mslaunch, per-node mode on a namespace cluster) is in
``tests/integration/test_msrun_e2e.py``.
"""

from __future__ import annotations

import json

import pytest

from launcher.cli import msrun_flags as options
from launcher.errors import PlanError, RankTableError
from launcher.planning.build import build_plan
from launcher.planning.inventory.sources import local_inventory
from launcher.planning.job.ranks import node_slots
from launcher.planning.job.spec import JobSpec, NodeSpec, worker_log_name
from tests.harness.cli import run_process


def spec(**kw):
    base = dict(
        inventory=local_inventory(2),
        program=("net.py",),
        python="/usr/bin/python3",
        cwd="/w",
        job_dir="/w/logs",
        job_id="j1",
        np=4,
    )
    base.update(kw)
    return JobSpec(**base)


# ---------------------------------------------------------------- planning: per-node mode


@pytest.mark.parametrize(
    "world, local, node_rank, ranks",
    [
        (4, 2, 0, [0, 1]),
        (4, 2, 1, [2, 3]),
        (16, 8, 1, list(range(8, 16))),
        (2, 2, 5, [0, 1]),  # one node only: msrun ignores --node_rank
        (4, 2, None, [0, 1]),  # ranks left to MindSpore: local indexes
    ],
)
def test_node_slots(world, local, node_rank, ranks):
    slots = node_slots(world, local, node_rank)
    assert [s.rank for s in slots] == ranks
    assert [s.local_rank for s in slots] == list(range(local))
    assert [s.device_id for s in slots] == list(range(local))
    assert {(s.world_size, s.local_world_size) for s in slots} == {(world, local)}


@pytest.mark.parametrize(
    "args, field, text",
    [
        ((4, 2, 2), "--node_rank", "gives ranks 4..5, but --worker_num is 4 (node ranks 0..1)"),
        ((4, 2, -3), "--node_rank", "must be >= 0"),
        ((2, 4, 0), "--local_worker_num", "more than --worker_num"),
        ((0, 1, 0), "--worker_num", "at least 1"),
    ],
)
def test_node_slots_errors(args, field, text):
    with pytest.raises(PlanError) as exc:
        node_slots(*args)
    assert exc.value.field == field and text in exc.value.message


def test_per_node_plan_node1_without_scheduler():
    plan = build_plan(
        spec(
            node=NodeSpec(node_rank=1, local_worker_num=2, owns_master=False), master_addr="10.1.0.1", master_port=8123
        )
    )
    assert plan.scheduler is None
    assert plan.world_size == 4 and plan.launcher == "local"
    assert [(p.name, p.rank, p.local_rank, p.node_rank, p.device_id, p.log) for p in plan.ranks] == [
        ("rank 2", 2, 0, 1, 0, "/w/logs/worker_2.log"),
        ("rank 3", 3, 1, 1, 1, "/w/logs/worker_3.log"),
    ]
    env = plan.ranks[1].env_dict()
    assert {
        k: env[k]
        for k in (
            "MS_ROLE",
            "MS_WORKER_NUM",
            "MS_SCHED_HOST",
            "MS_SCHED_PORT",
            "MS_NODE_ID",
            "RANK_ID",
            "RANK_SIZE",
            "DEVICE_ID",
            "LOCAL_RANK",
        )
    } == {
        "MS_ROLE": "MS_WORKER",
        "MS_WORKER_NUM": "4",
        "MS_SCHED_HOST": "10.1.0.1",
        "MS_SCHED_PORT": "8123",
        "MS_NODE_ID": "3",
        "RANK_ID": "3",
        "RANK_SIZE": "4",
        "DEVICE_ID": "1",
        "LOCAL_RANK": "1",
    }


@pytest.mark.parametrize(
    "node, has_sched",
    [
        (NodeSpec(node_rank=0, local_worker_num=2, owns_master=True), True),
        (NodeSpec(node_rank=0, local_worker_num=2, owns_master=None), True),  # unknown: node 0 runs it
        (NodeSpec(node_rank=1, local_worker_num=2, owns_master=None), False),
        (NodeSpec(node_rank=1, local_worker_num=2, owns_master=True), True),  # msrun: the master's owner
    ],
)
def test_per_node_scheduler_placement(node, has_sched):
    plan = build_plan(spec(node=node, master_addr="10.1.0.1"))
    assert (plan.scheduler is not None) == has_sched
    if has_sched:
        env = plan.scheduler.env_dict()
        assert (env["MS_ROLE"], env["MS_WORKER_NUM"], env["MS_SCHED_HOST"]) == ("MS_SCHED", "4", "10.1.0.1")


def test_per_node_without_node_rank_leaves_ranks_to_mindspore():
    plan = build_plan(
        spec(node=NodeSpec(node_rank=None, local_worker_num=2, owns_master=False), master_addr="10.1.0.1")
    )
    assert [(p.name, p.rank, p.log) for p in plan.ranks] == [
        ("worker 0", None, "/w/logs/worker_0.log"),
        ("worker 1", None, "/w/logs/worker_1.log"),
    ]
    assert not {"MS_NODE_ID", "RANK_ID"} & set(plan.ranks[0].env_dict())


def test_per_node_refuses_an_inventory():
    from launcher.planning.inventory.hostarg import parse_host_list

    with pytest.raises(PlanError) as exc:
        build_plan(spec(inventory=parse_host_list("a:2,b:2"), node=NodeSpec(0, 2)))
    assert exc.value.field == "--node_rank"


# ---------------------------------------------------------------- planning: other msrun flags


def test_worker_log_name_and_rank_table_export():
    name = worker_log_name("w_{ip}_{hostname}", "10.0.0.5", "node7")
    assert name == "w_10.0.0.5_node7"
    plan = build_plan(spec(np=2, worker_log_name=name, rank_table_file="/t/rt.json"))
    assert [p.log for p in plan.ranks] == ["/w/logs/w_10.0.0.5_node7_0.log", "/w/logs/w_10.0.0.5_node7_1.log"]
    assert plan.scheduler.log == "/w/logs/scheduler.log"
    assert {p.env_dict()["RANK_TABLE_FILE"] for p in plan.processes} == {"/t/rt.json"}
    with pytest.raises(PlanError) as exc:
        worker_log_name("a/b", "1", "h")
    assert exc.value.field == "--worker_log_name"


def test_simulation_plan():
    plan = build_plan(spec(np=4, inventory=local_inventory(4), sim_level=1))
    assert plan.scheduler is None
    env = plan.ranks[3].env_dict()
    assert env["MS_SIMULATION_LEVEL"] == "1" and env["MS_NODE_ID"] == "3" and env["RANK_ID"] == "3"
    assert not {"MS_ROLE", "MS_SCHED_HOST", "MS_SCHED_PORT"} & set(env)
    one = build_plan(spec(np=4, inventory=local_inventory(4), sim_level=0, sim_rank_id=2))
    assert [(p.rank, p.log, p.env_dict()["RANK_ID"]) for p in one.ranks] == [(2, "/w/logs/worker_0.log", "2")]
    with pytest.raises(PlanError):
        build_plan(spec(np=4, inventory=local_inventory(4), sim_level=0, sim_rank_id=4))


def test_bind_numa_prefix():
    plan = build_plan(spec(np=2, bind_numa=(("device1", "0"), ("scheduler", "0-1"))))
    assert plan.ranks[0].argv == ("/usr/bin/python3", "/w/net.py")
    assert plan.ranks[1].argv == ("numactl", "--membind", "0", "--cpunodebind", "0", "/usr/bin/python3", "/w/net.py")
    assert plan.scheduler.argv[:5] == ("numactl", "--membind", "0-1", "--cpunodebind", "0-1")


# ---------------------------------------------------------------- cli helpers


@pytest.mark.parametrize("text, value", [("True", True), ("False", False), ("true", True), ("0", False)])
def test_msrun_bool(text, value):
    assert options.parse_msrun_bool(text, "--join") is value


def test_msrun_bool_error():
    with pytest.raises(PlanError) as exc:
        options.parse_msrun_bool("yes please", "--join")
    assert exc.value.field == "--join"


@pytest.mark.parametrize(
    "env, got",
    [
        ({"MS_NODE_RANK": "2", "SLURM_NODEID": "5"}, (2, "MS_NODE_RANK")),
        ({"SLURM_NODEID": "1"}, (1, "SLURM_NODEID")),
        ({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_NODE_RANK": "0"}, (3, "OMPI_COMM_WORLD_RANK")),
    ],
)
def test_node_rank_from_env(env, got):
    assert options.node_rank_from_env(env) == got


@pytest.mark.parametrize("env, text", [({}, "none of MS_NODE_RANK"), ({"MS_NODE_RANK": "x"}, "not a node index")])
def test_node_rank_from_env_errors(env, text):
    with pytest.raises(PlanError) as exc:
        options.node_rank_from_env(env)
    assert text in exc.value.message


@pytest.mark.parametrize(
    "text, pairs",
    [
        ("True", ()),
        ("false", ()),
        (None, ()),
        ('{"device0": ["0"], "scheduler": ["0-1"]}', (("device0", "0"), ("scheduler", "0-1"))),
    ],
)
def test_parse_bind_numa(text, pairs):
    assert options.parse_bind_numa(text) == pairs


@pytest.mark.parametrize("text", ['{"gpu0": ["0"]}', '{"device0": "0"}', "maybe", "/nope/bind.json"])
def test_parse_bind_numa_errors(text):
    with pytest.raises(PlanError):
        options.parse_bind_numa(text)


def test_tail_ranks():
    assert options.tail_ranks("-1") is None
    assert options.tail_ranks("0,3") == (0, 3)
    with pytest.raises(PlanError):
        options.tail_ranks("all")


# ---------------------------------------------------------------- the CLI accepts msrun's command lines


def dry_run(args, monkeypatch, tmp_path, env=None):
    from typer.testing import CliRunner

    from launcher.cli.app import _register, app

    monkeypatch.chdir(tmp_path)
    (tmp_path / "net.py").write_text("")  # run checks that the script exists
    for name in options.NODE_RANK_VARS + ("MS_WORKER_NUM", "MS_LOCAL_WORKER", "MS_SCHED_HOST", "MS_SCHED_PORT"):
        monkeypatch.delenv(name, raising=False)
    for k, v in (env or {}).items():
        monkeypatch.setenv(k, v)
    _register()
    result = CliRunner().invoke(app, ["run", "--dry-run", "--json", *args, "net.py", "--lr", "0.1"])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


@pytest.mark.parametrize("style", ["equals", "space"])
def test_every_msrun_flag_is_accepted(style, monkeypatch, tmp_path):
    table = tmp_path / "rt.json"
    table.write_text(
        json.dumps(
            {
                "version": "1.0",
                "server_count": "1",
                "status": "completed",
                "server_list": [
                    {
                        "server_id": "10.0.0.1",
                        "host_nic_ip": "reserve",
                        "device": [
                            {"device_id": "0", "device_ip": "192.1.27.6", "rank_id": "0"},
                            {"device_id": "1", "device_ip": "192.2.27.6", "rank_id": "1"},
                        ],
                    }
                ],
            }
        )
    )
    flags = {
        "--worker_num": "4",
        "--local_worker_num": "2",
        "--master_addr": "127.0.0.1",
        "--master_port": "8200",
        "--node_rank": "1",
        "--log_dir": "msrun_log",
        "--join": "True",
        "--cluster_time_out": "300",
        "--bind_numa": "False",
        "--rank_table_file": str(table),
        "--worker_log_name": "w_{hostname}",
        "--tail_worker_log": "2,3",
    }
    args = [f"{k}={v}" for k, v in flags.items()] if style == "equals" else [x for kv in flags.items() for x in kv]
    plan = dry_run(args, monkeypatch, tmp_path)
    import socket

    assert plan["job_dir"] == str(tmp_path / "msrun_log")
    assert [(r["rank"], r["log"]) for r in plan["ranks"]] == [
        (2, str(tmp_path / "msrun_log" / f"w_{socket.gethostname()}_2.log")),
        (3, str(tmp_path / "msrun_log" / f"w_{socket.gethostname()}_3.log")),
    ]
    env = plan["ranks"][0]["env"]
    assert (env["MS_TOPO_TIMEOUT"], env["MS_SCHED_PORT"], env["RANK_TABLE_FILE"], env["MS_WORKER_NUM"]) == (
        "300",
        "8200",
        str(table),
        "4",
    )
    assert plan["ranks"][0]["argv"][1:] == [str(tmp_path / "net.py"), "--lr", "0.1"]
    assert plan["scheduler"]["log"] == str(tmp_path / "msrun_log" / "scheduler.log")  # 127.0.0.1 is this machine's


def test_simulation_flags_accepted(monkeypatch, tmp_path):
    plan = dry_run(
        ["--worker_num=4", "--local_worker_num=4", "--sim_level=1", "--sim_rank_id=2"], monkeypatch, tmp_path
    )
    assert "scheduler" not in plan
    assert [(r["rank"], r["env"]["MS_SIMULATION_LEVEL"]) for r in plan["ranks"]] == [(2, "1")]


def test_node_rank_auto_reads_the_operator_env(monkeypatch, tmp_path):
    env = {
        "MS_NODE_RANK": "1",
        "MS_WORKER_NUM": "4",
        "MS_LOCAL_WORKER": "2",
        "MS_SCHED_HOST": "10.99.0.1",
        "MS_SCHED_PORT": "9000",
    }
    plan = dry_run(["--node_rank", "auto"], monkeypatch, tmp_path, env)
    assert "scheduler" not in plan  # 10.99.0.1 is not this machine's
    assert [r["rank"] for r in plan["ranks"]] == [2, 3]
    assert (
        plan["ranks"][0]["env"]["MS_SCHED_HOST"] == "10.99.0.1" and plan["ranks"][0]["env"]["MS_SCHED_PORT"] == "9000"
    )


def test_msrun_multinode_line_uses_ms_node_rank(monkeypatch, tmp_path):
    plan = dry_run(
        ["--worker_num=4", "--local_worker_num=2", "--master_addr=10.99.0.1"],
        monkeypatch,
        tmp_path,
        {"SLURM_NODEID": "1"},
    )
    assert [r["rank"] for r in plan["ranks"]] == [None, None]  # msrun without --node_rank: MindSpore assigns
    plan = dry_run(
        ["--worker_num=4", "--local_worker_num=2", "--master_addr=10.99.0.1"],
        monkeypatch,
        tmp_path,
        {"MS_NODE_RANK": "1"},
    )
    assert [r["rank"] for r in plan["ranks"]] == [2, 3]


def test_bad_rank_table_file_is_refused_before_start(monkeypatch, tmp_path):
    bad = tmp_path / "rt.json"
    bad.write_text('{"version": "1.0", "server_list": []}')
    with pytest.raises(RankTableError) as exc:
        dry_run(["--worker_num=2", "--local_worker_num=2", f"--rank_table_file={bad}"], monkeypatch, tmp_path)
    assert exc.value.path == str(bad)


def test_without_detach_drops_join_false_in_both_spellings():
    from launcher.cli.run import _without_detach

    assert _without_detach(["run", "--join=False", "--np", "2", "-d", "x.py"]) == ["run", "--np", "2", "x.py"]
    assert _without_detach(["run", "--join", "False", "--detach", "x.py"]) == ["run", "x.py"]


def test_join_false_runs_in_the_background(tmp_path):
    """msrun's --join=False: mslaunch starts the job detached, prints its id and returns 0; the
    job runs on to its summary (tiny processes, no MindSpore)."""
    import os
    import time

    prog = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "rankprog.py")
    r = run_process(
        "run",
        "--worker_num",
        "2",
        "--local_worker_num",
        "2",
        "--master_port",
        "auto",
        "--log_dir",
        "jf",
        "--join",
        "False",
        prog,
        "ok",
        "0.5",
        cwd=tmp_path,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.strip()
    summary = tmp_path / "jf" / "summary.json"
    deadline = time.monotonic() + 60
    while not summary.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    got = json.loads(summary.read_text())
    assert (got["job_id"], got["status"], got["exit_code"]) == (job_id, "succeeded", 0)
    assert {"worker_0.log", "worker_1.log", "scheduler.log"} <= set(os.listdir(tmp_path / "jf"))
