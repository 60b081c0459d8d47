"""Fault tests on the namespace cluster (real sshd per host): SIGKILL of mslaunch ends every
remote rank and its setsid grandchildren; a host whose agent never starts is reported as "did
not start" within ``--ssh-start-timeout``; mpirun's OpenSSH gets the ssh config mslaunch itself
resolved from ``$HOME`` (HOME differing from the passwd home).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat

import pytest

from tests.harness.ci import require_tool
from tests.harness.faultkit import Fault, escaper, kill_all, marked, survivors, tree, wait_for
from tests.harness.paths import TESTS

HERE = TESTS
PROG = os.path.join(HERE, "scripts", "rankprog.py")


@pytest.fixture
def cluster(netns_cluster):
    c = netns_cluster
    assert wait_for(lambda: c.all_pids() == {}, 15), "a previous test left processes behind"
    yield c
    left = wait_for(lambda: c.all_pids() == {}, 20)
    if not left:
        c.reset()
        pytest.fail(f"processes left in the namespaces: {c.all_pids()}")


@pytest.fixture
def fault(tmp_path, cluster):
    f = Fault(tmp_path, env=dict(os.environ, MSLAUNCH_SSH_CONFIG=cluster.ssh_config))
    f.c = cluster
    yield f
    kill_all(marked(f.marker))


def hosts_yaml(c, path, python=None) -> str:
    lines = ["defaults:", "  slots: 2", f'  ssh: {{user: root, port: 22, key: "{c.key_path}"}}']
    if python is not None:
        lines.append(f"  python: {python}")
    lines.append("hosts:")
    lines += [f"  - host: {h.ip}" for h in c.hosts]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.mark.e2e
def test_sigkill_of_mslaunch_ends_remote_ranks_and_grandchildren(fault):
    c = fault.c
    proc = fault.popen(*escaper(fault, "hang"), np=None, extra=("--hosts", c.inventory_yaml))
    # scheduler + 6 ranks on 3 hosts, each: itself, a child, a setsid grandchild
    assert wait_for(lambda: len(marked(fault.marker)) >= 21, 90), marked(fault.marker)
    snapshot = tree(proc.pid)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert survivors(fault.marker, snapshot, timeout=30) == []
    assert wait_for(lambda: c.all_pids() == {}, 20), c.all_pids()


@pytest.mark.e2e
def test_agent_that_never_starts_is_reported_as_not_started(fault, tmp_path):
    """The host's "python" reads its input and never answers, like a login shell that hangs."""
    c = fault.c
    stuck = tmp_path / "stuck-python"
    stuck.write_text(f"#!/bin/sh\n# {fault.marker}\nwhile read -r line; do :; done\n")
    stuck.chmod(stuck.stat().st_mode | stat.S_IXUSR)
    inv = hosts_yaml(c, tmp_path / "inv.yaml", python=str(stuck))
    r = fault.run(PROG, "ok", "0.2", np=None, extra=("--hosts", inv, "--ssh-start-timeout", "3"))
    assert r.returncode == 255, r.stderr
    s = fault.summary()
    cause = s["root_cause"]
    assert "did not start within --ssh-start-timeout 3 s" in cause["reason"], cause
    assert "connection" not in cause["reason"]
    assert survivors(fault.marker, {}, timeout=30) == []


@pytest.mark.e2e
def test_mpirun_gets_the_ssh_config_mslaunch_resolved_from_home(fault, tmp_path):
    require_tool("mpirun", package="openmpi-bin")
    c = fault.c
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    shutil.copy(c.ssh_config, home / ".ssh" / "config")
    fault.env = dict(fault.env, HOME=str(home))
    fault.env.pop("MSLAUNCH_SSH_CONFIG")
    r = fault.run(
        PROG,
        "env",
        np=None,
        extra=("--hosts", c.hostfile, "--launcher", "mpirun", "--method", "mpi", "--nic", str(c.subnet)),
    )
    assert r.returncode == 0, r.stderr + (fault.dir / "mpirun.log").read_text()
    plan = json.loads((fault.dir / "plan.json").read_text())
    argv = plan["mpirun"]
    assert argv[argv.index("plm_rsh_agent") + 1] == f"ssh -F {home}/.ssh/config -o BatchMode=yes"
    for rank in range(6):
        assert f"RANK_ID={rank}" in (fault.dir / f"worker_{rank}.log").read_text().splitlines()
