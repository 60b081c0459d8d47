"""Inventory parsing (hostfile, -H, YAML), filters, rank assignment: table-driven and property tests."""

from __future__ import annotations

import glob
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from launcher.errors import InventoryError, MsLaunchError, PlanError
from launcher.planning.inventory.clusteryaml import parse_cluster_yaml
from launcher.planning.inventory.filters import apply_filters, parse_filter
from launcher.planning.inventory.hostarg import parse_host_list
from launcher.planning.inventory.hostfile import parse_hostfile
from launcher.planning.inventory.model import Host, SshOptions
from launcher.planning.inventory.sources import read_inventory
from launcher.planning.job.ranks import RankSlot, assign_ranks, used_inventory
from tests.harness.hypo import examples
from tests.harness.paths import REPO

ROOT = REPO


def names_slots(inv):
    return [(h.name, h.slots, h.max_slots) for h in inv.hosts]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("node1 slots=8\nnode2 slots=8\n", [("node1", 8, None), ("node2", 8, None)]),
        ("# comment\n\n  node1   slots=2 max_slots=4  # trailing\n", [("node1", 2, 4)]),
        ("node1:4\nnode2\n", [("node1", 4, None), ("node2", 1, None)]),
        ("10.0.0.1 slots=8\n10.0.0.2 slots=8", [("10.0.0.1", 8, None), ("10.0.0.2", 8, None)]),
        # OpenMPI's forms: spaces around '=', every alias, max_slots alone, repeated lines
        ("a slots = 2\nb slots= 3 max_slots = 4\nc slots =5\n", [("a", 2, None), ("b", 3, 4), ("c", 5, None)]),
        (
            "a cpu=2\nb count=3 slots-max=4\nc max-cpu=6 cpu_max=5\nd count_max=2 max_count=3 count-max=4 "
            "max-slots=5\n",
            [("a", 2, None), ("b", 3, 4), ("c", 5, 5), ("d", 5, 5)],
        ),
        ("a max_slots=3\nb slots_max=2 slots=1\n", [("a", 3, 3), ("b", 1, 2)]),
        ("a\na\nb\na\n", [("a", 3, None), ("b", 1, None)]),
        ("a slots=2\na\nb\nb max_slots=4\n", [("a", 3, None), ("b", 2, 4)]),
        (
            "a slots=2 // c\n// x\n/* one\n two */ b /* three */ c slots=3\n/* open",
            [("a", 2, None), ("b", 1, None), ("c", 3, None)],
        ),
        ("a\tslots=2\f\v\nb slots=2#c\nc#c\n", [("a", 2, None), ("b", 2, None), ("c", 1, None)]),
        ("n[1-2] slots=2\n", [("n1", 2, None), ("n2", 2, None)]),
    ],
)
def test_parse_hostfile(text, expected):
    assert names_slots(parse_hostfile(text, "h.txt")) == expected


@pytest.mark.parametrize(
    "text, message",
    [
        ("node1 slots=0\n", "h.txt:1: slots must be a positive integer, got '0'"),
        ("node1 slots=8\n\nnode2 slots=x\n", "h.txt:3: slots must be a positive integer, got 'x'"),
        (
            "node1 slots=8\nnode1 slots=8\n",
            "h.txt:2: host 'node1' is listed again (first at line 1) with slots=: a repeated line adds one slot; list "
            "each host once with its total slots",
        ),
        ("node1 cpus=8\n", "h.txt:1: unknown hostfile key 'cpus'; use slots=N, max_slots=N, username=U or port=P"),
        ("node1 8\n", "h.txt:1: expected key=value, got '8' (e.g. 'slots=8')"),
        ("# nothing\n", "h.txt: no hosts in hostfile; add lines like 'node1 slots=8'"),
        ("node1 slots=4 max_slots=2\n", "h.txt:1: max_slots=2 is below slots=4"),
        ("node1 max_slots=2 slots=4\n", "h.txt:1: max_slots=2 is below slots=4 of host 'node1'"),
        ("node1 foo slots=2\n", "h.txt:1: expected key=value, got 'foo' (e.g. 'slots=8')"),
        ("node1 username=\n", "h.txt:1: username must be a user name (letters, digits, '_', '.', '-'), got ''"),
        (
            "node1 username=-oProxyCommand\n",
            "h.txt:1: username must be a user name (letters, digits, '_', '.', '-'), got '-oProxyCommand'",
        ),
        ("node1 port=65536\n", "h.txt:1: port must be in 1..65535, got '65536'"),
        ("node1\nbob@node1\n", "h.txt:2: host 'node1' is listed again (first at line 1) with another user"),
        (
            "node1 port=22\nnode1 port=23\n",
            "h.txt:2: host 'node1' is listed again (first at line 1) with another user or port",
        ),
        (
            "a\n^node1\n",
            "h.txt:2: '^node1': '^host' lines are not read (OpenMPI 4.1 does not exclude with them); use --exclude",
        ),
        (
            "rank 0=node1 slot=0\n",
            "h.txt:1: 'rank N=host' is a rankfile line; list hosts here (mslaunch assigns the ranks)",
        ),
        ("+n0\n", "h.txt:1: '+n0': relative nodes (+n0, +e) need an existing allocation; name the hosts"),
        ("a\nx */ b\n", "h.txt:2: expected key=value, got '*/' (e.g. 'slots=8')"),
        ("a /* x */\n*/\n", "h.txt:2: '*/' without an opening '/*'"),
        ("bad$host slots=1\n", "h.txt:1: invalid host name 'bad$host'"),
    ],
)
def test_parse_hostfile_errors(text, message):
    with pytest.raises(InventoryError) as err:
        parse_hostfile(text, "h.txt")
    assert str(err.value) == message


@pytest.mark.parametrize(
    "text, ssh",
    [
        ("a username=bob port=2222\n", ("bob", 2222)),
        ("a user_name = bob\n", ("bob", None)),
        ("a user-name=first.last\n", ("first.last", None)),
        ("bob@a port = 22\n", ("bob", 22)),
        ("bob@a username=eve\n", ("eve", None)),
        ("a port=2222\na\n", (None, 2222)),
        ("a\na username=bob\n", ("bob", None)),
    ],
)
def test_hostfile_ssh_user_and_port(text, ssh):
    (host,) = parse_hostfile(text, "h.txt").hosts
    assert (host.name, host.ssh) == ("a", SshOptions(user=ssh[0], port=ssh[1]))


def test_host_list():
    assert names_slots(parse_host_list("h1:8,h2:8")) == [("h1", 8, None), ("h2", 8, None)]
    assert names_slots(parse_host_list("h1")) == [("h1", 1, None)]
    for bad, msg in [
        ("h1:0", "-H: slot count of 'h1' must be a positive integer, got '0' (write h1:8,h2:8)"),
        ("h1:8,,h2", "-H: empty entry #2 in host list 'h1:8,,h2'; write h1:8,h2:8"),
        ("h1:2,h1:2", "-H: duplicate host 'h1'; list each host once with its total slots"),
    ]:
        with pytest.raises(InventoryError) as err:
            parse_host_list(bad)
        assert str(err.value) == msg


YAML = """\
defaults: {ssh: {user: root, port: 22, key: ~/.ssh/id_ed25519}, env: {GLOG_v: "2"}}
hosts:
  - host: 10.0.0.1                 # name or IP
    slots: 8
    devices: [0,1,2,3,4,5,6,7]
    hccn_conf: hccn/10.0.0.1.conf
  - host: 10.0.0.2
    slots: 2
    device_ips: {"0": 192.1.27.8, "1": 192.2.27.8}
    env: {NCCL_SOCKET_IFNAME: en5}
    ssh: {port: 2222}
"""


def test_parse_cluster_yaml():
    inv = parse_cluster_yaml(YAML, "c.yaml", base_dir="/etc/cluster")
    a, b = inv.hosts
    assert a == Host(
        name="10.0.0.1",
        slots=8,
        devices=(0, 1, 2, 3, 4, 5, 6, 7),
        hccn_conf="/etc/cluster/hccn/10.0.0.1.conf",
        env=(("GLOG_v", "2"),),
        ssh=SshOptions(user="root", port=22, key="~/.ssh/id_ed25519"),
        source="c.yaml:3",
    )
    assert b == Host(
        name="10.0.0.2",
        slots=2,
        device_ips=((0, "192.1.27.8"), (1, "192.2.27.8")),
        env=(("GLOG_v", "2"), ("NCCL_SOCKET_IFNAME", "en5")),
        ssh=SshOptions(user="root", port=2222, key="~/.ssh/id_ed25519"),
        source="c.yaml:7",
    )


@pytest.mark.parametrize(
    "text, message",
    [
        ("hosts:\n  - host: a\n    slot: 2\n", "c.yaml:3: unknown key hosts[0].slot; expected one of"),
        ("hosts:\n  - host: a\n    slots: 0\n", "c.yaml:3: hosts[0].slots must be a positive integer, got 0"),
        ("hosts:\n  - host: a\n    slots: two\n", "c.yaml:3: hosts[0].slots must be an integer"),
        (
            "hosts:\n  - host: a\n    slots: 1\n  - host: a\n    slots: 1\n",
            "c.yaml:4: duplicate host 'a' (first at c.yaml:2)",
        ),
        (
            "hosts:\n  - host: a\n    slots: 2\n    devices: [0]\n",
            "c.yaml:4: hosts[0].devices lists 1 devices but slots is 2",
        ),
        ("hosts: [\n", "c.yaml:2: invalid YAML:"),
        ("nodes: []\n", "c.yaml:1: unknown top-level key 'nodes'"),
        ("hosts:\n  - slots: 1\n", "c.yaml:2: hosts[0] has no 'host:'"),
        ("", "c.yaml: empty cluster file"),
        ("hosts:\n  - host: a\n", "c.yaml:2: hosts[0] (a) has no 'slots:'"),
        ("defaults: {ssh: {port: 0}}\nhosts: [a]\n", "c.yaml:1: defaults.ssh.port must be 1..65535"),
    ],
)
def test_parse_cluster_yaml_errors(text, message):
    with pytest.raises(InventoryError) as err:
        parse_cluster_yaml(text, "c.yaml")
    assert str(err.value).startswith(message)


def test_read_inventory_errors(tmp_path):
    with pytest.raises(InventoryError) as err:
        read_inventory(str(tmp_path / "missing.txt"))
    assert str(err.value) == f"{tmp_path}/missing.txt: no such file; pass an existing hostfile or cluster YAML"
    binary = tmp_path / "bin.txt"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(InventoryError, match="not UTF-8"):
        read_inventory(str(binary))


def test_every_example_hostfile_parses():
    files = sorted(glob.glob(os.path.join(ROOT, "hostfiles", "*")))
    files = [f for f in files if os.path.isfile(f) and not f.endswith(".md")]
    assert files, "hostfiles/ has examples"
    for path in files:
        inv = read_inventory(path)
        assert inv.hosts and all(h.slots >= 1 for h in inv.hosts), path


HOSTS = parse_host_list("a:4,b:4,c:2")


@pytest.mark.parametrize(
    "include, exclude, expected",
    [
        ("a:0,1@c", None, [("a", (0, 1)), ("c", (0, 1))]),
        ("b", None, [("b", (0, 1, 2, 3))]),
        (None, "a:0@b", [("a", (1, 2, 3)), ("c", (0, 1))]),
        (None, "c:0,1", [("a", (0, 1, 2, 3)), ("b", (0, 1, 2, 3))]),
    ],
)
def test_filters(include, exclude, expected):
    inv = apply_filters(HOSTS, include, exclude)
    assert [(h.name, h.device_ids) for h in inv.hosts] == expected
    assert [h.slots for h in inv.hosts] == [len(d) for _, d in expected]


@pytest.mark.parametrize(
    "include, exclude, message",
    [
        ("z", None, "--include: host 'z' is not in the inventory (a, b, c)"),
        ("a:9", None, "--include: host 'a' has no device 9 (devices [0, 1, 2, 3])"),
        ("a", "b", "--include: --include and --exclude are mutually exclusive"),
        (None, "a@b@c", "--exclude: the filters leave no hosts"),
        ("a:x", None, "--include: slot ids in 'a:x' must be integers, e.g. a:0,1"),
    ],
)
def test_filter_errors(include, exclude, message):
    with pytest.raises(InventoryError) as err:
        apply_filters(HOSTS, include, exclude)
    assert str(err.value) == message


def test_assign_ranks_fills_by_slot():
    slots = assign_ranks(parse_host_list("h1:2,h2:2"))
    assert slots == (
        RankSlot(0, 0, 0, "h1", 0, 4, 2),
        RankSlot(1, 1, 0, "h1", 1, 4, 2),
        RankSlot(2, 0, 1, "h2", 0, 4, 2),
        RankSlot(3, 1, 1, "h2", 1, 4, 2),
    )


def test_assign_ranks_np_per_host_and_order():
    inv = parse_host_list("h1:4,h2:4,h3:4")
    slots = assign_ranks(inv, np=5, per_host=2)
    assert [(s.host, s.local_rank, s.node_rank, s.local_world_size) for s in slots] == [
        ("h1", 0, 0, 2),
        ("h1", 1, 0, 2),
        ("h2", 0, 1, 2),
        ("h2", 1, 1, 2),
        ("h3", 0, 2, 1),
    ]
    used = used_inventory(inv, slots)
    assert [(h.name, h.device_ids) for h in used.hosts] == [("h1", (0, 1)), ("h2", (0, 1)), ("h3", (0,))]


def test_assign_ranks_errors():
    inv = parse_host_list("h1:2,h2:2")
    with pytest.raises(PlanError) as err:
        assign_ranks(inv, np=5)
    assert (
        str(err.value)
        == "--np: requested 5 ranks but the inventory has only 4 slots (h1:2, h2:2); lower --np or add hosts/slots"
    )
    with pytest.raises(PlanError, match="with --per-host 1"):
        assign_ranks(inv, np=3, per_host=1)
    with pytest.raises(PlanError, match="--np must be at least 1"):
        assign_ranks(inv, np=0)


# ------------------------------------------------------------------ property tests: only MsLaunchError


@settings(max_examples=examples(300), deadline=None)
@given(st.text())
def test_hostfile_parser_only_raises_mslaunch_error(text):
    try:
        parse_hostfile(text, "h")
    except MsLaunchError:
        pass


@settings(max_examples=examples(300), deadline=None)
@given(st.text())
def test_host_list_parser_only_raises_mslaunch_error(text):
    try:
        parse_host_list(text)
    except MsLaunchError:
        pass


yaml_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 70000) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                ["host", "slots", "devices", "env", "ssh", "port", "user", "device_ips", "hosts", "defaults", "x", "0"]
            ),
            children,
            max_size=4,
        )
    ),
    max_leaves=12,
)


@settings(max_examples=examples(300), deadline=None)
@given(st.one_of(st.text(), yaml_values.map(lambda v: __import__("yaml").safe_dump(v))))
def test_yaml_parser_only_raises_mslaunch_error(text):
    try:
        parse_cluster_yaml(text, "c.yaml")
    except MsLaunchError:
        pass


@settings(max_examples=examples(200), deadline=None)
@given(st.text(), st.sampled_from(["--include", "--exclude"]))
def test_filters_only_raise_mslaunch_error(text, flag):
    try:
        parse_filter(text, flag)
        apply_filters(HOSTS, text if flag == "--include" else None, text if flag == "--exclude" else None)
    except MsLaunchError:
        pass
