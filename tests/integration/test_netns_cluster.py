"""The namespace cluster fixture itself: addresses, OpenSSH and paramiko logins, host-to-host
reachability, link cuts, sshd stops, process accounting and complete teardown."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import List

import paramiko
import pytest

from launcher.planning.inventory.clusteryaml import parse_cluster_yaml
from launcher.planning.inventory.hostfile import parse_hostfile
from tests.harness.netns_cluster import NamespaceCluster, NamespaceClusterError

pytestmark = pytest.mark.netns

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _netns_names() -> List[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _link_exists(name: str) -> bool:
    return subprocess.run(["ip", "link", "show", "dev", name], capture_output=True).returncode == 0


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[-1].split()[0] not in (b"Z", b"X")
    except OSError:
        return False


def _sleeping(c: NamespaceCluster, host: str) -> List[int]:
    """Pids of ``sleep 300`` processes in ``host``'s namespace."""
    out = []
    for pid in c.pids_in(host):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if fh.read().split(b"\0")[:2] == [b"sleep", b"300"]:
                    out.append(pid)
        except OSError:
            pass
    return out


def _paramiko_client(cluster: NamespaceCluster, name: str, known_hosts: str) -> paramiko.SSHClient:
    conf = paramiko.SSHConfig.from_path(cluster.ssh_config).lookup(name)
    client = paramiko.SSHClient()
    client.load_host_keys(known_hosts)
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    client.connect(
        conf["hostname"],
        port=int(conf["port"]),
        username=conf["user"],
        key_filename=conf["identityfile"],
        timeout=5,
        banner_timeout=5,
        auth_timeout=5,
        allow_agent=False,
        look_for_keys=False,
    )
    return client


# ------------------------------------------------------------------------------- layout and files


def test_three_hosts_with_distinct_addresses_and_generated_files(netns_cluster: NamespaceCluster) -> None:
    c = netns_cluster
    assert [h.name for h in c.hosts] == ["h1", "h2", "h3"]
    assert [h.index for h in c.hosts] == [0, 1, 2]
    assert c.subnet is not None and c.subnet.prefixlen == 24
    assert [h.ip for h in c.hosts] == [str(c.subnet.network_address + i) for i in (1, 2, 3)]
    assert c.bridge_ip == str(c.subnet.network_address + 254)
    assert all(len(n) <= 15 for n in [c.bridge] + [h.veth for h in c.hosts])
    assert set(h.netns for h in c.hosts) <= set(_netns_names())
    assert c.host("h2") == c.host(1) == c.host(c.hosts[1].ip) == c.host(c.hosts[1].netns)
    with pytest.raises(NamespaceClusterError):
        c.host(3)

    assert oct(os.stat(c.key_path).st_mode & 0o777) == "0o600"
    with open(c.known_hosts) as fh:
        known = [line.split()[0] for line in fh]
    assert known == [f"{h.name},{h.ip}" for h in c.hosts]

    with open(c.hostfile) as fh:
        inv = parse_hostfile(fh.read(), c.hostfile)
    assert [(h.name, h.slots) for h in inv.hosts] == [(h.ip, 2) for h in c.hosts]

    with open(c.inventory_yaml) as fh:
        yinv = parse_cluster_yaml(fh.read(), c.inventory_yaml)
    assert [(h.name, h.slots, h.ssh.user, h.ssh.port, h.ssh.key) for h in yinv.hosts] == [
        (h.ip, 2, "root", 22, c.key_path) for h in c.hosts
    ]

    with open(os.path.join(c.workdir, "state.json")) as fh:
        state = json.load(fh)
    assert state["created_netns"] == [h.netns for h in c.hosts]
    assert sorted(state["sshd_pids"]) == ["h1", "h2", "h3"]


# ------------------------------------------------------------------------------- logins


def test_openssh_login_by_name_shows_the_hosts_own_address(netns_cluster: NamespaceCluster) -> None:
    c = netns_cluster
    for h in c.hosts:
        r = c.ssh(h.name, "hostname -I; ip -4 -o addr show dev eth0; echo PATH=$PATH; echo SHLVL=$SHLVL", timeout=20)
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        assert lines[0].split() == [h.ip]
        assert f"inet {h.ip}/24" in lines[1]
        path = lines[2].split("=", 1)[1].split(":")
        assert {"/usr/local/bin", "/usr/bin", "/bin"} <= set(path)
        # sshd sets SHLVL=1 and bash raises it to 2, so bash skipped ~/.bashrc (source_bashrc=False)
        assert lines[3] == "SHLVL=2"
    # the plain OpenSSH command line a user would type, by IP as well as by name
    h3 = c.hosts[2]
    r = subprocess.run(["ssh", "-F", c.ssh_config, h3.ip, "hostname", "-I"], capture_output=True, text=True, timeout=20)
    assert (r.returncode, r.stdout.split()) == (0, [h3.ip]), r.stderr
    assert c.all_pids() == {}


def test_paramiko_login_with_generated_config_and_known_hosts(netns_cluster: NamespaceCluster) -> None:
    c = netns_cluster
    for h in c.hosts:
        client = _paramiko_client(c, h.name, c.known_hosts)
        try:
            _, stdout, _ = client.exec_command("echo ok; hostname -I", timeout=10)
            out = stdout.read().decode().split()
            assert stdout.channel.recv_exit_status() == 0
            assert out == ["ok", h.ip]
        finally:
            client.close()


def test_paramiko_rejects_a_host_missing_from_known_hosts(netns_cluster: NamespaceCluster, tmp_path) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    with pytest.raises(paramiko.SSHException, match="not found in known_hosts"):
        _paramiko_client(netns_cluster, "h1", str(empty))


def test_only_the_generated_key_is_accepted(netns_cluster: NamespaceCluster, tmp_path) -> None:
    c = netns_cluster
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    cfg = tmp_path / "cfg"
    with open(c.ssh_config) as fh:
        cfg.write_text(fh.read().replace(c.key_path, str(other)))
    r = subprocess.run(["ssh", "-F", str(cfg), "h1", "true"], capture_output=True, text=True, timeout=20)
    assert r.returncode == 255
    # the server offers public keys only: no password, no keyboard-interactive
    assert "Permission denied (publickey)." in r.stderr


def test_hosts_reach_each_other_by_ssh_from_inside(netns_cluster: NamespaceCluster) -> None:
    c = netns_cluster
    for src, dst in ((0, 1), (1, 2), (2, 0)):
        r = c.ssh(src, ["ssh", "-F", c.ssh_config, c.hosts[dst].name, "hostname -I"], timeout=30)
        assert (r.returncode, r.stdout.split()) == (0, [c.hosts[dst].ip]), r.stderr
    # and without ssh on the source side: ip netns exec
    r = c.exec_in("h1", ["ssh", "-F", c.ssh_config, "h3", "hostname", "-I"], timeout=30)
    assert (r.returncode, r.stdout.split()) == (0, [c.hosts[2].ip]), r.stderr
    assert c.all_pids() == {}


def test_namespaces_have_no_route_beyond_the_bridge(netns_cluster: NamespaceCluster) -> None:
    r = netns_cluster.exec_in(0, ["ip", "-4", "route", "show"], check=True)
    routes = r.stdout.splitlines()
    assert len(routes) == 1 and routes[0].startswith(f"{netns_cluster.subnet} dev eth0")


# ------------------------------------------------------------------------------- failures


def test_cut_link_makes_connections_fail_and_restore_link_brings_it_back(netns_cluster: NamespaceCluster) -> None:
    c = netns_cluster
    try:
        assert c.ssh("h2", "true", timeout=20).returncode == 0
        c.cut_link("h2")
        t0 = time.monotonic()
        r = c.ssh("h2", "true", connect_timeout=1, timeout=20)
        assert r.returncode == 255
        assert time.monotonic() - t0 < 10
        # the other hosts do not reach it either, and are themselves still fine
        r = c.ssh("h1", ["ssh", "-F", c.ssh_config, "-o", "ConnectTimeout=1", "h2", "true"], timeout=20)
        assert r.returncode == 255
        assert c.ssh("h3", "true", timeout=20).returncode == 0
        c.restore_link("h2")
        r = c.ssh("h2", "hostname -I", timeout=20)
        assert (r.returncode, r.stdout.split()) == (0, [c.hosts[1].ip]), r.stderr
    finally:
        c.reset()


def test_stop_sshd_refuses_connections_and_start_sshd_restores(netns_cluster: NamespaceCluster) -> None:
    c = netns_cluster
    try:
        pid = c.sshd_pid("h3")
        assert pid is not None
        c.stop_sshd("h3")
        assert c.sshd_pid("h3") is None and not _alive(pid)
        r = c.ssh("h3", "true", timeout=20)
        assert r.returncode == 255 and "refused" in r.stderr
        c.start_sshd("h3")
        assert c.ssh("h3", "true", timeout=20).returncode == 0
    finally:
        c.reset()


# ------------------------------------------------------------------------------- processes and teardown


def test_pids_in_sees_a_background_sleep_and_close_kills_it(make_netns_cluster) -> None:
    c = make_netns_cluster(2)
    assert c.pids_in(0) == [] and c.pids_in(1) == []
    r = c.ssh("h2", "nohup sleep 300 >/dev/null 2>&1 </dev/null & echo $!", timeout=20)
    assert r.returncode == 0, r.stderr
    sleep_pid = int(r.stdout.strip())

    # the ssh session's own processes (its shell, sshd's session child) exit a moment after the
    # client returns, and nohup execs sleep a moment after $! is known: wait for both
    def cmdline() -> List[bytes]:
        with open(f"/proc/{sleep_pid}/cmdline", "rb") as fh:
            return fh.read().split(b"\0")[:2]

    deadline = time.monotonic() + 10
    while (c.pids_in("h2") != [sleep_pid] or cmdline() != [b"sleep", b"300"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert c.pids_in("h2") == [sleep_pid]
    assert c.pids_in("h1") == []
    assert cmdline() == [b"sleep", b"300"]
    c.close()
    assert not _alive(sleep_pid)


def test_close_removes_namespaces_links_sshds_and_files_and_is_idempotent(make_netns_cluster) -> None:
    c = make_netns_cluster(3)
    names = [h.netns for h in c.hosts]
    links = [c.bridge] + [h.veth for h in c.hosts]
    sshd_pids = [c.sshd_pid(h.index) for h in c.hosts]
    assert all(p is not None and _alive(p) for p in sshd_pids)
    # a session still open at close time is cleaned up too
    session = subprocess.Popen(
        c.ssh_argv("h1", "sleep 300"), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 10
        while not _sleeping(c, "h1") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _sleeping(c, "h1")
        c.close()
        assert session.wait(timeout=10) != 0
    finally:
        if session.poll() is None:
            session.kill()
            session.wait()
    assert c.closed
    assert not set(names) & set(_netns_names())
    assert not any(_link_exists(link) for link in links)
    assert not any(_alive(p) for p in sshd_pids)  # type: ignore[arg-type]
    assert not os.path.exists(c.workdir)
    c.close()  # idempotent


def test_two_clusters_at_once_get_different_subnets_and_names(make_netns_cluster) -> None:
    a, b = make_netns_cluster(1), make_netns_cluster(1)
    assert a.subnet != b.subnet and a.prefix != b.prefix
    assert a.ssh(0, "hostname -I").stdout.split() == [a.hosts[0].ip]
    assert b.ssh(0, "hostname -I").stdout.split() == [b.hosts[0].ip]


def test_up_and_down_from_the_command_line(tmp_path) -> None:
    from tests.harness.conftest_netns import require_netns

    require_netns()
    d = tmp_path / "mslcluster"
    env = dict(os.environ, PYTHONPATH=REPO)
    up = subprocess.run(
        [sys.executable, "-m", "tests.harness.netns_cluster", "up", "--hosts", "2", "--dir", str(d)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env=env,
    )
    state_path = d / "state.json"
    try:
        assert up.returncode == 0, up.stderr
        assert f"ssh -F {d}/ssh_config h1" in up.stdout
        state = json.loads(state_path.read_text())
        assert [h["name"] for h in state["hosts"]] == ["h1", "h2"]
        r = subprocess.run(
            ["ssh", "-F", str(d / "ssh_config"), "h2", "hostname", "-I"], capture_output=True, text=True, timeout=20
        )
        assert (r.returncode, r.stdout.split()) == (0, [state["hosts"][1]["ip"]]), r.stderr
        again = subprocess.run(
            [sys.executable, "-m", "tests.harness.netns_cluster", "up", "--dir", str(d)],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=REPO,
            env=env,
        )
        assert again.returncode == 1 and "run 'down' first" in again.stderr
    finally:
        down = subprocess.run(
            [sys.executable, "-m", "tests.harness.netns_cluster", "down", "--dir", str(d)],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=REPO,
            env=env,
        )
    assert down.returncode == 0, down.stderr
    if state_path.exists():  # only if 'up' failed before writing state
        pytest.fail("state.json left behind")
    assert not d.exists()
    assert not {h["netns"] for h in state["hosts"]} & set(_netns_names())
    assert not _link_exists(state["bridge"])
    assert not any(_alive(int(p)) for p in state["sshd_pids"].values())
    down2 = subprocess.run(
        [sys.executable, "-m", "tests.harness.netns_cluster", "down", "--dir", str(d)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env=env,
    )
    assert down2.returncode == 0 and "nothing to do" in down2.stdout


def test_shared_cluster_is_left_clean(netns_cluster: NamespaceCluster) -> None:
    assert netns_cluster.all_pids() == {}
    assert all(netns_cluster.sshd_pid(h.index) is not None for h in netns_cluster.hosts)


def test_a_failed_setup_removes_what_it_created(monkeypatch, tmp_path) -> None:
    from tests.harness.conftest_netns import require_netns

    require_netns()
    prefix = f"mslf{os.getpid() % 100000}"

    def boom(self: NamespaceCluster, timeout: float) -> None:
        raise RuntimeError("sshd start failed (simulated)")

    monkeypatch.setattr(NamespaceCluster, "_start_all_sshd", boom)
    workdir = tmp_path / "cluster"
    with pytest.raises(RuntimeError, match="simulated"):
        NamespaceCluster(2, workdir=str(workdir), prefix=prefix)
    assert not [n for n in _netns_names() if n.startswith(prefix)]
    assert not _link_exists(f"{prefix}br") and not _link_exists(f"{prefix}v1")
    assert not workdir.exists()


def test_an_overlapping_subnet_is_refused(netns_cluster: NamespaceCluster, tmp_path) -> None:
    with pytest.raises(NamespaceClusterError, match="overlaps"):
        NamespaceCluster(1, workdir=str(tmp_path / "c"), subnet=str(netns_cluster.subnet))
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize(
    "ci, outcome", [(None, "skip"), ("", "skip"), ("false", "skip"), ("true", "fail"), ("1", "fail")]
)
def test_missing_prerequisites_skip_locally_but_fail_under_ci(monkeypatch, ci, outcome) -> None:
    import tests.harness.conftest_netns as conftest_netns

    monkeypatch.setattr(conftest_netns, "netns_unavailable_reason", lambda: "no sshd here (simulated)")
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    expected = pytest.skip.Exception if outcome == "skip" else pytest.fail.Exception
    with pytest.raises(expected, match="no sshd here"):
        conftest_netns.require_netns()
