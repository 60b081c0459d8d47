"""Plans: per-rank argv/env/cwd under each method, mpirun argv, env precedence, CLI plan --json."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from launcher.errors import MsLaunchError, PlanError
from launcher.planning.backends.mpirun import mpirun_command, mpirun_plan_launch
from launcher.planning.build import build_plan
from launcher.planning.inventory.hostarg import parse_host_list
from launcher.planning.inventory.hostfile import parse_hostfile
from launcher.planning.job.envs import parse_env_file
from launcher.planning.job.mpirun_options import MpiOptions
from launcher.planning.job.spec import JobSpec
from tests.harness.cli import run_process
from tests.harness.hypo import examples

INV = parse_hostfile("10.0.0.1 slots=8\n10.0.0.2 slots=8\n", "h.txt")
# : The job's MindSpore compile cache (--compile-cache), in every process's env unless the user sets it
# (envs.compile_cache_env).
MS_CACHE = {"MS_COMPILER_CACHE_ENABLE": "1", "MS_COMPILER_CACHE_PATH": "/work/mslaunch_logs/j1/compile_cache"}
OFFER = {"MSLAUNCH_COMPILE_CACHE": "/work/mslaunch_logs/j1/compile_cache"}  # always: the program decides
CACHE = {**MS_CACHE, **OFFER}
IPS = {
    h: {d: f"192.{d % 4 + 1}.27.{6 + d // 4 + 2 * i}" for d in range(8)} for i, h in enumerate(["10.0.0.1", "10.0.0.2"])
}

#: every process's view of the job's size (planned as run)
SIZES = {"MSLAUNCH_WORLD_SIZE": "16", "MSLAUNCH_PLANNED_WORLD_SIZE": "16"}


def spec(**kw):
    base = dict(
        inventory=INV,
        program=("train.py", "--epochs", "1"),
        python="/usr/bin/python3",
        cwd="/work",
        job_dir="/work/mslaunch_logs/j1",
        job_id="j1",
        compile_cache=True,
    )
    base.update(kw)
    return JobSpec(**base)


def test_dynamic_16_ranks():
    plan = build_plan(spec())
    assert plan.launcher == "ssh" and plan.world_size == 16 and len(plan.ranks) == 16
    r9 = plan.ranks[9]
    assert (r9.host, r9.rank, r9.local_rank, r9.node_rank, r9.device_id) == ("10.0.0.2", 9, 1, 1, 1)
    assert r9.argv == ("/usr/bin/python3", "/work/train.py", "--epochs", "1")
    assert r9.cwd == "/work"
    assert r9.env_dict() == {
        "PYTHONUNBUFFERED": "1",
        "MS_RETRY_INTERVAL_LOWER": "0",
        "MS_RETRY_INTERVAL_UPPER": "1",
        **CACHE,
        **SIZES,
        "MS_ROLE": "MS_WORKER",
        "MS_WORKER_NUM": "16",
        "MS_SCHED_HOST": "10.0.0.1",
        "MS_SCHED_PORT": "8118",
        "MS_NODE_ID": "9",
        "RANK_ID": "9",
        "RANK_SIZE": "16",
        "DEVICE_ID": "1",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "8",
    }
    assert plan.scheduler is not None and plan.scheduler.host == "10.0.0.1"
    assert plan.scheduler.env_dict() == {
        "PYTHONUNBUFFERED": "1",
        "MS_RETRY_INTERVAL_LOWER": "0",
        "MS_RETRY_INTERVAL_UPPER": "1",
        **CACHE,
        **SIZES,
        "MS_ROLE": "MS_SCHED",
        "MS_WORKER_NUM": "16",
        "MS_SCHED_HOST": "10.0.0.1",
        "MS_SCHED_PORT": "8118",
    }
    assert plan.ranks[15].log == "/work/mslaunch_logs/j1/worker_15.log"


def test_dynamic_master_override_and_tuning_skipped_when_user_set():
    plan = build_plan(
        spec(
            master_addr="10.0.0.2",
            master_port=9000,
            cluster_time_out=30,
            user_env_keys=frozenset({"MS_RETRY_INTERVAL_LOWER", "PYTHONUNBUFFERED"}),
        )
    )
    env = plan.ranks[0].env_dict()
    assert plan.scheduler.host == "10.0.0.2"
    assert (env["MS_SCHED_HOST"], env["MS_SCHED_PORT"], env["MS_TOPO_TIMEOUT"]) == ("10.0.0.2", "9000", "30")
    assert "MS_RETRY_INTERVAL_LOWER" not in env and "PYTHONUNBUFFERED" not in env
    assert env["MS_RETRY_INTERVAL_UPPER"] == "1"


@pytest.mark.parametrize("where", ["launching env", "--env", "--env-file", "host env", "without --compile-cache"])
@pytest.mark.parametrize("name", ["MS_COMPILER_CACHE_ENABLE", "MS_COMPILER_CACHE_PATH"])
def test_compile_cache_is_left_to_a_user_who_sets_either_variable(where, name):
    """The user's own compile cache settings (either name, in any layer) keep mslaunch's out
    entirely (no half-set pair); without ``--compile-cache`` (the default) none is set.  The job's
    folder is offered (``MSLAUNCH_COMPILE_CACHE``) to every process in every case."""
    from dataclasses import replace

    inv = parse_hostfile("10.0.0.1 slots=2\n", "h.txt")
    user = {
        "launching env": dict(user_env_keys=frozenset({name})),
        "--env": dict(env=((name, "0"),)),
        "--env-file": dict(env_files=(("e.env", ((name, "0"),)),)),
        "without --compile-cache": dict(compile_cache=False),
        "host env": dict(inventory=replace(inv, hosts=tuple(replace(h, env=((name, "0"),)) for h in inv.hosts))),
    }[where]
    plan = build_plan(spec(**{"inventory": inv, **user}))
    other = next(k for k in MS_CACHE if k != name)
    for proc in plan.processes:
        env = proc.env_dict()
        assert other not in env and env.items() >= OFFER.items(), (where, env)
        assert env.get(name) == (None if where in ("launching env", "without --compile-cache") else "0"), (where, env)
    assert build_plan(spec(inventory=inv)).ranks[0].env_dict().items() >= CACHE.items()
    assert not set(MS_CACHE) & set(build_plan(spec(inventory=inv, compile_cache=False)).ranks[0].env_dict())


def test_ranktable_16_ranks():
    plan = build_plan(spec(method="ranktable", device_ips=IPS))
    assert plan.scheduler is None and len(plan.ranks) == 16
    r12 = plan.ranks[12]
    assert r12.cwd == "/work/mslaunch_logs/j1/device12"
    assert r12.env_dump == "/work/mslaunch_logs/j1/device12/env12.log"
    assert r12.env_dict() == {
        "PYTHONUNBUFFERED": "1",
        **CACHE,
        **SIZES,
        "RANK_TABLE_FILE": "/work/mslaunch_logs/j1/rank_table.json",
        "RANK_ID": "12",
        "RANK_SIZE": "16",
        "DEVICE_ID": "4",
        "LOCAL_RANK": "4",
        "LOCAL_WORLD_SIZE": "8",
    }
    (art,) = plan.artefacts
    table = json.loads(art.content)
    assert art.name == "rank_table.json" and table["server_count"] == "2"
    dev = table["server_list"][1]["device"][4]
    assert dev == {"device_id": "4", "device_ip": IPS["10.0.0.2"][4], "rank_id": "12"}


def test_ranktable_ranks_follow_server_id_order():
    inv = parse_hostfile("10.0.0.9 slots=1\n10.0.0.10 slots=1\n")
    ips = {"10.0.0.9": {0: "192.1.1.1"}, "10.0.0.10": {0: "192.1.1.2"}}
    plan = build_plan(spec(inventory=inv, method="ranktable", device_ips=ips))
    assert [(r.host, r.rank) for r in plan.ranks] == [("10.0.0.10", 0), ("10.0.0.9", 1)]
    table = json.loads(plan.artefacts[0].content)
    assert [s["server_id"] for s in table["server_list"]] == ["10.0.0.10", "10.0.0.9"]


def test_mpi_16_ranks_and_mpirun_argv():
    plan = build_plan(spec(method="mpi", wrapper="/opt/w.sh", mpi=MpiOptions(allow_run_as_root=True, nic="eth0")))
    assert plan.launcher == "mpirun" and plan.scheduler is None
    assert plan.ranks[10].env_dict() == {
        "PYTHONUNBUFFERED": "1",
        **CACHE,
        **SIZES,
        "RANK_ID": "10",
        "RANK_SIZE": "16",
        "DEVICE_ID": "2",
        "LOCAL_RANK": "2",
        "LOCAL_WORLD_SIZE": "8",
    }
    names = [
        "PYTHONUNBUFFERED",
        "MS_COMPILER_CACHE_ENABLE",
        "MS_COMPILER_CACHE_PATH",
        "MSLAUNCH_COMPILE_CACHE",
        "MSLAUNCH_WORLD_SIZE",
        "MSLAUNCH_PLANNED_WORLD_SIZE",
        "RANK_SIZE",
        "LOCAL_WORLD_SIZE",
    ]
    # no value on the command line: each is forwarded from mpirun's environment by its carrier
    ctx = ["-x", "MSLAUNCH_VARS=" + ",".join(names)] + [a for n in names for a in ("-x", f"MSLAUNCH_V_{n}")]
    argv, env = mpirun_plan_launch(plan)
    assert env == {
        "MSLAUNCH_V_PYTHONUNBUFFERED": "1",
        "MSLAUNCH_V_MS_COMPILER_CACHE_ENABLE": "1",
        "MSLAUNCH_V_MS_COMPILER_CACHE_PATH": "/work/mslaunch_logs/j1/compile_cache",
        "MSLAUNCH_V_MSLAUNCH_COMPILE_CACHE": "/work/mslaunch_logs/j1/compile_cache",
        "MSLAUNCH_V_MSLAUNCH_WORLD_SIZE": "16",
        "MSLAUNCH_V_MSLAUNCH_PLANNED_WORLD_SIZE": "16",
        "MSLAUNCH_V_RANK_SIZE": "16",
        "MSLAUNCH_V_LOCAL_WORLD_SIZE": "8",
    }
    assert argv == mpirun_command(plan)
    assert mpirun_command(plan) == tuple(
        [
            "mpirun",
            "-H",
            "10.0.0.1:8,10.0.0.2:8",
            "--allow-run-as-root",
            "--mca",
            "btl_tcp_if_include",
            "eth0",
            "--mca",
            "oob_tcp_if_include",
            "eth0",
            "--mca",
            "plm_rsh_agent",
            "ssh -o BatchMode=yes",
            "--mca",
            "plm_rsh_no_tree_spawn",
            "1",
            "--mca",
            "rtc_hwloc_vmhole",
            "none",
            "--leave-session-attached",
            "--bind-to",
            "none",
            "-np",
            "8",
            "--host",
            "10.0.0.1:8",
            "-x",
            "MSLAUNCH_CTX_BASE=0",
            "-x",
            "MSLAUNCH_ROLE=worker",
            "-x",
            "MSLAUNCH_FIRST_RANK=0",
            "-x",
            "MSLAUNCH_DEVICES=0,1,2,3,4,5,6,7",
            "-x",
            "MSLAUNCH_LOG_DIR=/work/mslaunch_logs/j1",
            "-x",
            "MSLAUNCH_LOG_NAME=worker_{rank}.log",
            "-x",
            "MSLAUNCH_METHOD=mpi",
            "-x",
            "MSLAUNCH_SAMPLER=/usr/bin/python3",  # samples the ranks on their host: the straggler watch
        ]
        + ctx
        + [
            "/opt/w.sh",
            "/usr/bin/python3",
            "/work/train.py",
            "--epochs",
            "1",
            ":",
            "-np",
            "8",
            "--host",
            "10.0.0.2:8",
            "-x",
            "MSLAUNCH_CTX_BASE=8",
            "-x",
            "MSLAUNCH_ROLE=worker",
            "-x",
            "MSLAUNCH_FIRST_RANK=8",
            "-x",
            "MSLAUNCH_DEVICES=0,1,2,3,4,5,6,7",
            "-x",
            "MSLAUNCH_LOG_DIR=/work/mslaunch_logs/j1",
            "-x",
            "MSLAUNCH_LOG_NAME=worker_{rank}.log",
            "-x",
            "MSLAUNCH_METHOD=mpi",
            "-x",
            "MSLAUNCH_SAMPLER=/usr/bin/python3",  # samples the ranks on their host: the straggler watch
        ]
        + ctx
        + [
            "/opt/w.sh",
            "/usr/bin/python3",
            "/work/train.py",
            "--epochs",
            "1",
        ]
    )


def test_dynamic_under_mpirun_has_scheduler_context():
    inv = parse_host_list("localhost:2")
    plan = build_plan(spec(inventory=inv, launcher="mpirun", wrapper="/w.sh", mpi=MpiOptions(hostfile="/j/hostfile")))
    argv = list(mpirun_command(plan))
    assert argv[:3] == ["mpirun", "--hostfile", "/j/hostfile"]
    assert argv.count(":") == 1
    first = argv[: argv.index(":")]
    assert first[3:9] == ["--bind-to", "none", "-np", "1", "--host", "localhost:3"]
    _, env = mpirun_plan_launch(plan)
    assert "MSLAUNCH_V0_MS_ROLE" in first and "MSLAUNCH_ROLE=scheduler" in first
    second = argv[argv.index(":") + 1 :]
    assert second[:4] == ["-np", "2", "--host", "localhost:3"]
    assert "MSLAUNCH_V1_MS_ROLE" in second and "MSLAUNCH_CTX_BASE=1" in second
    assert (env["MSLAUNCH_V0_MS_ROLE"], env["MSLAUNCH_V1_MS_ROLE"]) == ("MS_SCHED", "MS_WORKER")
    assert not any("MS_ROLE=" in a for a in argv)  # a value differing by context: its own carrier
    assert not any("MS_NODE_ID" in a for a in argv)  # per rank: derived by the wrapper
    assert [a.kind for a in plan.artefacts] == ["hostfile"]
    assert plan.artefacts[0].content == "localhost slots=2\n"


def test_env_precedence_and_reserved():
    inv = parse_hostfile("localhost slots=1\n")
    from dataclasses import replace

    inv = type(inv)((replace(inv.hosts[0], env=(("A", "host"), ("B", "host"), ("C", "host"))),))
    plan = build_plan(spec(inventory=inv, env_files=(("f.env", (("B", "file"), ("C", "file"))),), env=(("C", "flag"),)))
    env = plan.ranks[0].env_dict()
    assert (env["A"], env["B"], env["C"]) == ("host", "file", "flag")
    with pytest.raises(PlanError) as err:
        build_plan(spec(env=(("MS_SCHED_PORT", "1"),)))
    assert str(err.value) == "--env: MS_SCHED_PORT is set by mslaunch for the dynamic method (use --master-port)"


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(method="nccl"), "--method: unknown method 'nccl'; use one of dynamic, ranktable, mpi"),
        (
            dict(launcher="local"),
            "--launcher: --launcher local runs on this machine only, but the inventory has 10.0.0.1, 10.0.0.2; use ssh "
            "or mpirun",
        ),
        (
            dict(method="mpi", launcher="ssh"),
            "--launcher: the mpi method needs --launcher mpirun (OpenMPI assigns the ranks)",
        ),
        (
            dict(method="ranktable"),
            "--method: the ranktable method needs device IPs: pass --hccn-dir, --hccn HOST=PATH or a YAML inventory "
            "with device_ips/hccn_conf",
        ),
        (dict(program=()), "SCRIPT: no program given; pass a script, -m MODULE, or --no-python EXECUTABLE"),
        (dict(master_port=70000), "--master-port: --master-port must be 1..65535, got 70000"),
    ],
)
def test_plan_errors(kw, message):
    with pytest.raises(PlanError) as err:
        build_plan(spec(**kw))
    assert str(err.value) == message


def test_module_and_no_python_argv():
    plan = build_plan(spec(program=("pkg.train", "-x"), module=True))
    assert plan.ranks[0].argv == ("/usr/bin/python3", "-m", "pkg.train", "-x")
    plan = build_plan(spec(program=("./run.sh", "a b"), no_python=True))
    assert plan.ranks[0].argv == ("./run.sh", "a b")


def test_env_file_parsing():
    assert parse_env_file("# c\nexport A=1\nB='two words'\nC=\"x=y\"\n\nD=\n", "e") == (
        ("A", "1"),
        ("B", "two words"),
        ("C", "x=y"),
        ("D", ""),
    )
    with pytest.raises(MsLaunchError) as err:
        parse_env_file("A=1\nnot a pair\n", "e.env")
    assert str(err.value) == "e.env:2: expected NAME=VALUE, got 'not a pair'"


@pytest.mark.e2e
def test_cli_plan_json_2x8_each_method(tmp_path):
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("10.0.0.1 slots=8\n10.0.0.2 slots=8\n")
    hccn = tmp_path / "hccn"
    hccn.mkdir()
    for host, ips in IPS.items():
        (hccn / f"{host}.conf").write_text(
            "".join(f"address_{d}={ip}\nnetmask_{d}=255.255.255.0\n" for d, ip in ips.items())
        )
    expected_keys = {
        "dynamic": {
            "MS_ROLE",
            "MS_WORKER_NUM",
            "MS_SCHED_HOST",
            "MS_SCHED_PORT",
            "MS_NODE_ID",
            "RANK_ID",
            "RANK_SIZE",
            "DEVICE_ID",
        },
        "ranktable": {"RANK_TABLE_FILE", "RANK_ID", "RANK_SIZE", "DEVICE_ID"},
        "mpi": {"RANK_ID", "RANK_SIZE", "DEVICE_ID"},
    }
    for method, keys in expected_keys.items():
        r = run_process(
            "plan",
            "--json",
            "--hosts",
            str(hosts),
            "--method",
            method,
            "--hccn-dir",
            str(hccn),
            "--log-dir",
            str(tmp_path / "job"),
            "train.py",
            cwd=tmp_path,
            timeout=60,
        )
        assert r.returncode == 0, r.stderr
        data = json.loads(r.stdout)
        assert len(data["ranks"]) == 16
        for i, rank in enumerate(data["ranks"]):
            assert (
                rank["rank"] == i
                and rank["host"] == ("10.0.0.1" if i < 8 else "10.0.0.2")
                and rank["device_id"] == i % 8
            )
            assert keys <= set(rank["env"]), method
            assert (
                rank["env"]["RANK_ID"] == str(i)
                and rank["env"]["DEVICE_ID"] == str(i % 8)
                and rank["env"]["RANK_SIZE"] == "16"
            )
        assert ("scheduler" in data) == (method == "dynamic")
        if method == "ranktable":
            assert data["ranks"][3]["env"]["RANK_TABLE_FILE"] == str(tmp_path / "job" / "rank_table.json")
            assert data["artefacts"] == [
                {"name": "rank_table.json", "kind": "rank_table", "path": str(tmp_path / "job" / "rank_table.json")}
            ]
        if method == "mpi":
            assert data["mpirun"][0] == "mpirun"
    assert not (tmp_path / "job").exists()  # planning writes nothing


@pytest.mark.e2e
def test_cli_env_show_and_errors(tmp_path):
    r = run_process(
        "env", "show", "--rank", "1", "-H", "localhost:2", "--env", "X=a b", "--master-port", "9100", "t.py", timeout=60
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "export MS_NODE_ID=1" in lines and "export X='a b'" in lines and "export MS_SCHED_PORT=9100" in lines
    bad = tmp_path / "bad.yaml"
    bad.write_text("hosts:\n  - host: a\n    slots: -1\n")
    r = run_process("plan", "--hosts", str(bad), "t.py", timeout=60)
    assert r.returncode == 2
    assert r.stderr == f"mslaunch: error: {bad}:3: hosts[0].slots must be a positive integer, got -1\n"
    r = run_process("env", "show", "--rank", "5", "-H", "localhost:2", "t.py", timeout=60)
    assert (r.returncode, r.stderr) == (2, "mslaunch: error: --rank: rank 5 is not in 0..1\n")


@pytest.mark.e2e
def test_cli_hostfile_gen(tmp_path):
    yaml_file = tmp_path / "c.yaml"
    yaml_file.write_text("hosts:\n  - {host: a, slots: 4}\n  - {host: b, slots: 4}\n")
    out = tmp_path / "hostfile"
    r = run_process("hostfile", "gen", "--hosts", str(yaml_file), "--include", "a:0,1@b", "-o", str(out), timeout=60)
    assert r.returncode == 0, r.stderr
    assert out.read_text() == "a slots=2\nb slots=4\n"
    r = run_process("hostfile", "gen", "-H", "n1:2,n2", timeout=60)
    assert r.stdout == "n1 slots=2\nn2 slots=1\n"


@pytest.mark.e2e
def test_msrun_flag_names_are_accepted(tmp_path):
    r = run_process(
        "plan",
        "--json",
        "--worker_num",
        "2",
        "--master_port",
        "9999",
        "--log_dir",
        str(tmp_path / "j"),
        "t.py",
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert (data["world_size"], data["master_port"], data["job_dir"]) == (2, 9999, str(tmp_path / "j"))


@settings(max_examples=examples(300), deadline=None)
@given(st.text())
def test_env_file_parser_only_raises_mslaunch_error(text):
    try:
        pairs = parse_env_file(text, "e.env")
    except MsLaunchError:
        return
    assert all(k and "=" not in k for k, _ in pairs)
