"""The ssh launcher's parts without a cluster: ssh config resolution, quoting, host key policies,
mpirun's rsh agent planning and doctor's checks (the host agent run locally:
``tests/execution/ssh/test_remote_agent.py``).

(Everything that needs real sshds is in ``tests/integration/test_multihost.py``.)
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess

import paramiko
import pytest

from launcher.errors import LaunchError, PlanError
from launcher.execution.checks.doctor import Check, DoctorJob, check_rows
from launcher.execution.mpirun.backend import MPIRUN_CHECK
from launcher.execution.ssh.agent import agent_command
from launcher.execution.ssh.config import SshTarget, config_path, read_ssh_config, resolve_addrs, resolve_target
from launcher.execution.ssh.connection import describe_connect_error
from launcher.execution.ssh.hostkeys import AcceptNewPolicy, RefuseUnknownPolicy, UnknownHostKey, fingerprint
from launcher.execution.ssh.remote_link import BOOTSTRAP
from launcher.planning.backends import mpirun as mpi
from launcher.planning.build import build_plan
from launcher.planning.inventory.clusteryaml import parse_cluster_yaml
from launcher.planning.inventory.hostarg import parse_host_list
from launcher.planning.inventory.model import Host, Inventory, SshOptions
from launcher.planning.job.spec import JobSpec
from tests.harness.cli import run_process
from tests.harness.paths import REPO

CONFIG = """\
Host h1 alias1
    HostName 10.9.9.1
    User alice
    Port 2201
    IdentityFile ~/.ssh/id_h1
    UserKnownHostsFile ~/kh/known one/two

Host h2
    HostName 10.9.9.2
    IdentitiesOnly yes
    IdentityFile /keys/k2

Host *
    User bob
    StrictHostKeyChecking accept-new
"""


@pytest.fixture
def home(tmp_path, monkeypatch):
    h = tmp_path / "home"
    (h / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(h))
    monkeypatch.delenv("MSLAUNCH_SSH_CONFIG", raising=False)
    return h


# ------------------------------------------------------------------------------ ssh config


def test_target_follows_ssh_config_with_tilde_from_home(home):
    (home / ".ssh" / "config").write_text(CONFIG)
    conf = read_ssh_config(config_path())
    t = resolve_target(Host("h1", 2), conf)
    assert t == SshTarget(
        name="h1",
        hostname="10.9.9.1",
        port=2201,
        user="alice",
        key_files=(f"{home}/.ssh/id_h1",),
        known_hosts=(f"{home}/kh/known", "one/two"),
        global_known_hosts=("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2"),
        accept_new=True,
        allow_agent=True,
        look_for_keys=False,
    )
    assert t.label == "h1 (10.9.9.1:2201)"
    t2 = resolve_target(Host("h2", 1), conf)
    assert (t2.hostname, t2.port, t2.user, t2.key_files, t2.allow_agent, t2.look_for_keys) == (
        "10.9.9.2",
        22,
        "bob",
        ("/keys/k2",),
        False,
        False,
    )
    assert t2.known_hosts == (f"{home}/.ssh/known_hosts", f"{home}/.ssh/known_hosts2")
    other = resolve_target(Host("10.1.1.1", 1), conf)
    assert (other.hostname, other.port, other.user, other.key_files, other.look_for_keys) == (
        "10.1.1.1",
        22,
        "bob",
        (),
        True,
    )


def test_inventory_ssh_settings_win_over_the_config(home):
    (home / ".ssh" / "config").write_text(CONFIG)
    conf = read_ssh_config(config_path())
    t = resolve_target(Host("h1", 2, ssh=SshOptions(user="root", port=22, key="~/other")), conf, known_hosts="~/kh2")
    assert (t.hostname, t.port, t.user, t.key_files, t.known_hosts) == (
        "10.9.9.1",
        22,
        "root",
        (f"{home}/other",),
        (f"{home}/kh2",),
    )


def test_config_path_precedence(home, tmp_path, monkeypatch):
    assert config_path() is None  # no ~/.ssh/config
    (home / ".ssh" / "config").write_text("")
    assert config_path() == f"{home}/.ssh/config"
    monkeypatch.setenv("MSLAUNCH_SSH_CONFIG", "~/env_cfg")
    assert config_path() == f"{home}/env_cfg"
    assert config_path("/x/flag_cfg") == "/x/flag_cfg"


def test_include_is_expanded_relative_to_dot_ssh(home):
    (home / ".ssh" / "conf.d").mkdir()
    (home / ".ssh" / "conf.d" / "a.conf").write_text("Host inc\n    HostName 10.8.8.8\n    Port 2222\n")
    (home / ".ssh" / "config").write_text("Include conf.d/*.conf\nHost *\n    User carol\n")
    t = resolve_target(Host("inc", 1), read_ssh_config(config_path()))
    assert (t.hostname, t.port, t.user) == ("10.8.8.8", 2222, "carol")


def test_missing_explicit_config_is_a_clear_error(tmp_path):
    with pytest.raises(LaunchError, match=r"no such ssh config file"):
        read_ssh_config(str(tmp_path / "nope"))


def test_resolve_addrs_gives_aliases_their_hostname(home):
    (home / ".ssh" / "config").write_text(CONFIG)
    inv = parse_host_list("h1:2,h2:2,10.1.1.1:1")
    out = resolve_addrs(inv, None)
    assert [h.addr for h in out.hosts] == ["10.9.9.1", "10.9.9.2", None]
    assert [h.name for h in out.hosts] == ["h1", "h2", "10.1.1.1"]


@pytest.mark.e2e
def test_master_addr_is_the_resolved_hostname_in_the_plan(home, tmp_path, monkeypatch):
    cfg = tmp_path / "cfg"
    cfg.write_text(CONFIG)
    monkeypatch.setenv("MSLAUNCH_SSH_CONFIG", str(cfg))
    r = run_process("plan", "--json", "-H", "h1:1,h2:1", "--log-dir", str(tmp_path / "j"), "x.py", cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert (plan["launcher"], plan["master_addr"], plan["ssh_config"]) == ("ssh", "10.9.9.1", str(cfg))
    assert {p["env"]["MS_SCHED_HOST"] for p in plan["ranks"]} == {"10.9.9.1"}


# ------------------------------------------------------------------------------ quoting


@pytest.mark.parametrize("python", ["python3", "/opt/my python/bin/python3", "/x/$(touch y);'\"`"])
def test_agent_command_quotes_every_piece(python):
    cmd = agent_command(python)
    assert shlex.split(cmd) == ["exec", python, "-S", "-u", "-c", BOOTSTRAP]


# ------------------------------------------------------------------------------ host keys


@pytest.mark.needs("ssh-keygen")
def test_accept_new_policy_records_the_key(tmp_path):
    key = paramiko.Ed25519Key.from_private_key_file(_make_key(tmp_path))
    path = tmp_path / "sub" / "known_hosts"
    client = paramiko.SSHClient()
    AcceptNewPolicy(str(path)).missing_host_key(client, "[10.1.2.3]:2222", key)
    assert path.read_text() == f"[10.1.2.3]:2222 ssh-ed25519 {key.get_base64()}\n"
    assert oct(path.stat().st_mode & 0o777) == "0o600" and oct(path.parent.stat().st_mode & 0o777) == "0o700"
    assert client.get_host_keys().lookup("[10.1.2.3]:2222")["ssh-ed25519"] == key
    loaded = paramiko.HostKeys(str(path))
    assert loaded.lookup("[10.1.2.3]:2222")["ssh-ed25519"] == key


@pytest.mark.needs("ssh-keygen")
def test_refuse_policy_and_its_message(tmp_path):
    key = paramiko.Ed25519Key.from_private_key_file(_make_key(tmp_path))
    with pytest.raises(UnknownHostKey) as info:
        RefuseUnknownPolicy().missing_host_key(paramiko.SSHClient(), "10.1.2.3", key)
    target = SshTarget("h9", "10.1.2.3", 2222, "root", (), ("/k/known_hosts",))
    msg = describe_connect_error(target, info.value, 5.0)
    assert msg == (
        f"host key for h9 is not known (ssh-ed25519 {fingerprint(key)}); verify it and add it to known_hosts "
        "(ssh-keyscan -p 2222 10.1.2.3 >> /k/known_hosts) or pass --ssh-accept-new"
    )
    assert re.fullmatch(r"SHA256:[A-Za-z0-9+/]{43}", fingerprint(key))


def test_no_auto_add_policy_in_the_launcher():
    hits = []
    for root, _, files in os.walk(os.path.join(REPO, "launcher")):
        for name in files:
            if name.endswith(".py") and "AutoAddPolicy" in open(os.path.join(root, name), encoding="utf-8").read():
                hits.append(name)
    assert hits == []


@pytest.mark.parametrize(
    "exc,expected",
    [
        (
            paramiko.AuthenticationException("x"),
            "authentication failed as root@10.1.2.3:22 (keys: /k/id (missing)); check User/IdentityFile",
        ),
        (
            paramiko.ssh_exception.NoValidConnectionsError({("10.1.2.3", 22): ConnectionRefusedError(111, "refused")}),
            "connection refused by 10.1.2.3:22 (is sshd running there?)",
        ),
        (TimeoutError(), "no answer from 10.1.2.3:22 within 3 s (host down or link cut?)"),
    ],
)
def test_connect_errors_are_one_line_and_name_the_host(exc, expected):
    target = SshTarget("h9", "10.1.2.3", 22, "root", ("/k/id",), ())
    assert describe_connect_error(target, exc, 3.0).startswith(expected)


def _make_key(tmp_path) -> str:
    path = tmp_path / "hostkey"
    if not path.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return str(path)


# ------------------------------------------------------------------------------ mpirun's rsh agent


def _spec(inv: Inventory, **kw) -> JobSpec:
    base = dict(
        inventory=inv,
        program=("/w/train.py",),
        python="/usr/bin/python3",
        cwd="/w",
        job_dir="/w/job",
        job_id="j1",
        method="mpi",
        launcher="mpirun",
        wrapper="/t/mslaunch-rank.sh",
    )
    base.update(kw)
    return JobSpec(**base)


def _mca(argv, key):
    return [argv[i + 2] for i in range(len(argv) - 2) if argv[i] == "--mca" and argv[i + 1] == key]


def test_mpirun_rsh_agent_from_uniform_inventory_settings():
    inv = parse_cluster_yaml(
        "defaults:\n  slots: 1\n  ssh: {user: root, port: 2222, key: /k/id}\nhosts:\n  - host: 10.0.0.1\n    nic: "
        "eth0\n  - host: 10.0.0.2\n    nic: ens5\n"
    )
    plan = build_plan(_spec(inv, ssh_config="/c/ssh_config"))
    argv = mpi.mpirun_command(plan)
    assert _mca(argv, "plm_rsh_agent") == ["ssh -F /c/ssh_config -p 2222 -i /k/id -l root -o BatchMode=yes"]
    assert _mca(argv, "plm_rsh_no_tree_spawn") == ["1"]
    assert _mca(argv, "btl_tcp_if_include") == ["eth0,ens5"] and _mca(argv, "oob_tcp_if_include") == ["eth0,ens5"]
    assert [a.name for a in plan.artefacts] == []


def test_mpirun_rsh_agent_with_per_host_settings_writes_a_config():
    inv = parse_cluster_yaml(
        "hosts:\n  - host: a\n    slots: 1\n    ssh: {port: 2201}\n  - host: b\n    slots: 1\n    ssh: {user: u, key: "
        "/k/b}\n"
    )
    plan = build_plan(_spec(inv, ssh_config="/c/cfg"))
    assert _mca(mpi.mpirun_command(plan), "plm_rsh_agent") == ["ssh -F /w/job/ssh_config -o BatchMode=yes"]
    art = {a.name: a for a in plan.artefacts}["ssh_config"]
    assert art.content == (
        "# generated by mslaunch: per-host ssh settings of the inventory, for mpirun's rsh agent\n"
        "Host a\n    Port 2201\nHost b\n    User u\n    IdentityFile /k/b\nMatch all\n    Include /c/cfg\n"
    )


def test_mpirun_local_only_has_no_rsh_agent_and_nic_flag_wins():
    plan = build_plan(_spec(parse_host_list("localhost:2"), mpi=mpi.MpiOptions(nic="10.0.0.0/24")))
    assert _mca(mpi.mpirun_command(plan), "plm_rsh_agent") == [] and _mca(
        mpi.mpirun_command(plan), "btl_tcp_if_include"
    ) == ["10.0.0.0/24"]


def test_rsh_agent_rejects_paths_with_spaces():
    with pytest.raises(PlanError, match="splits on spaces"):
        mpi.rsh_agent([Host("a", 1)], "/my dir/cfg", "/j/ssh_config")


# ------------------------------------------------------------------------------ doctor's checks


def _job(hosts, **kw) -> DoctorJob:
    base = dict(
        hosts=tuple(hosts),
        python={h.name: "/py" for h in hosts},
        script={h.name: "/w/t.py" for h in hosts},
        module=None,
        exe=None,
        cwd="/w",
        master=(hosts[0].name, 8118),
        hccn_path=None,
    )
    base.update(kw)
    return DoctorJob(**base)


def _probe(**kw):
    data = {
        "time": 100.0,
        "elapsed": 0.01,
        "python": "3.11.7",
        "mindspore": "2.10.0",
        "script_found": True,
        "cwd_found": True,
    }
    data.update(kw)
    return (data, 99.0, 100.01)


def test_doctor_rows_flag_the_odd_python_the_busy_port_and_the_unreachable_host():
    hosts = [Host("a", 1), Host("b", 1), Host("c", 1), Host("d", 1)]
    results = {
        "a": _probe(port_free=False, port_error="Address already in use"),
        "b": _probe(python="3.9.2", mindspore=""),
        "c": _probe(time=103.0, script_found=False),
        "d": "connection refused by d:22 (is sshd running there?)",
    }
    rows = {r.host: r for r in check_rows(_job(hosts), results, {})}
    assert rows["a"].check("master port") == Check(
        "master port", False, "8118 in use on a (Address already in use); pass --master-port auto or another port"
    )
    assert rows["a"].check("python") == Check("python", True, "3.11.7")
    assert rows["b"].check("python") == Check("python", False, "3.9.2 differs from 3.11.7 (a, c)")
    assert rows["b"].check("mindspore") == Check("mindspore", False, "not installed for /py")
    assert rows["c"].check("clock") == Check("clock", False, "+3.000 s")
    assert rows["c"].check("workload") == Check("workload", False, "/w/t.py missing")
    assert rows["d"].check("ssh") == Check("ssh", False, "connection refused by d:22 (is sshd running there?)")
    assert rows["d"].check("python").ok is None
    assert [r.ok for r in rows.values()] == [False, False, False, False]
    assert rows["b"].check("master port").ok is None and rows["b"].check("hccn.conf").ok is None


def test_doctor_rows_mpirun_and_hccn():
    hosts = [Host("a", 1), Host("b", 1)]
    results = {
        "a": _probe(mpirun="4.1.4", hccn_devices=8),
        "b": _probe(mpirun="4.1.2", hccn_error="No such file or directory"),
    }
    rows = {
        r.host: r
        for r in check_rows(
            _job(hosts, tools=(MPIRUN_CHECK,), hccn_path="/etc/hccn.conf", master=None), results, {"mpirun": "4.1.4"}
        )
    }
    assert rows["a"].ok and rows["a"].check("hccn.conf") == Check("hccn.conf", True, "8 device addresses")
    assert rows["b"].check("mpirun") == Check("mpirun", False, "4.1.2 differs from 4.1.4 on this machine")
    assert rows["b"].check("hccn.conf") == Check("hccn.conf", False, "/etc/hccn.conf: No such file or directory")
