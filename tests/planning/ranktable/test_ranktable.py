"""Rank tables (launcher.planning.ranktable): resolve device IPs, build, merge, validate, render."""

from __future__ import annotations

import copy
import json
import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from launcher.errors import MsLaunchError, RankTableError
from launcher.planning.inventory.clusteryaml import parse_cluster_yaml
from launcher.planning.inventory.hostfile import parse_hostfile
from launcher.planning.inventory.model import Host, Inventory
from launcher.planning.ranktable import (
    RankTableJSONError,
    Violation,
    build_rank_table,
    check_rank_table,
    default_table_name,
    merge_rank_tables,
    parse_rank_table_json,
    rank_table_json,
    read_rank_table,
    resolve_device_ips,
    table_size,
    validate_rank_table,
)
from tests.harness.hypo import examples
from tests.harness.paths import TESTS

DATA = os.path.join(TESTS, "data")
HCCN_DIR = os.path.join(DATA, "hccn")


def data(name: str) -> str:
    with open(os.path.join(DATA, name), encoding="utf-8") as fh:
        return fh.read()


def seed(n: int) -> Dict[str, Any]:
    """Seed 001's rank_table_<n>pcs.json (server ids made concrete: 10.0.0.1, 10.0.0.2)."""
    return json.loads(data(f"seed001_rank_table_{n}pcs.json"))


def ips(host: int, devices: Sequence[int] = range(8)) -> Dict[int, str]:
    """Seed-style device IPs: host h, device d -> 192.<d%4+1>.<h>.<d//4+1>."""
    return {d: f"192.{d % 4 + 1}.{host}.{d // 4 + 1}" for d in devices}


def v10(servers: Sequence[Tuple[str, Sequence[Tuple[int, str]]]], **top: Any) -> Dict[str, Any]:
    """A 1.0 table with ranks numbered in the order given."""
    rank = 0
    out = []
    for sid, devices in servers:
        devs = []
        for did, ip in devices:
            devs.append({"device_id": str(did), "device_ip": ip, "rank_id": str(rank)})
            rank += 1
        out.append({"server_id": sid, "device": devs, "host_nic_ip": "reserve"})
    table = {"version": "1.0", "server_count": str(len(out)), "server_list": out, "status": "completed"}
    table.update(top)
    return table


def one_server(device_ids: Sequence[int], sid: str = "10.0.0.1") -> Dict[str, Any]:
    return v10([(sid, [(d, ips(1)[d % 8] if d < 8 else f"10.9.9.{d}") for d in device_ids])])


# --------------------------------------------------------------------------------------------
# golden: seed 001


def test_golden_8_devices_from_hccn_conf() -> None:
    inv = parse_hostfile("10.0.0.1 slots=8\n", path="hosts")
    device_ips = resolve_device_ips(inv, hccn_dir=HCCN_DIR)
    table = build_rank_table(inv, device_ips)
    assert table == seed(8)
    assert rank_table_json(table) == data("golden/rank_table_8pcs.json")
    assert validate_rank_table(table) == []
    assert default_table_name(table) == "hccl_8p_01234567_10.0.0.1.json"


def test_golden_16_devices_from_hccn_conf() -> None:
    inv = parse_hostfile(data("hosts_2x8"), path="hosts_2x8")
    device_ips = resolve_device_ips(inv, hccn_dir=HCCN_DIR)
    table = build_rank_table(inv, device_ips)
    assert table == seed(16)
    assert rank_table_json(table) == data("golden/rank_table_16pcs.json")
    assert validate_rank_table(table) == []
    assert default_table_name(table) == "rank_table_16pcs.json"


def test_golden_16_devices_hosts_listed_in_reverse() -> None:
    inv = parse_hostfile("10.0.0.2 slots=8\n10.0.0.1 slots=8\n")
    table = build_rank_table(inv, resolve_device_ips(inv, hccn_dir=HCCN_DIR))
    assert rank_table_json(table) == data("golden/rank_table_16pcs.json")


def test_seed_files_are_valid_and_render_to_golden() -> None:
    for n in (8, 16):
        table = read_rank_table(os.path.join(DATA, f"seed001_rank_table_{n}pcs.json"))
        assert validate_rank_table(table) == []
        assert rank_table_json(table) == data(f"golden/rank_table_{n}pcs.json")


# --------------------------------------------------------------------------------------------
# resolve_device_ips


class FakeFs:
    """Injectable hccn.conf reader: path -> {device: ip}; records reads."""

    def __init__(self, files: Dict[str, Dict[int, str]]) -> None:
        self.files = files
        self.reads: List[str] = []

    def read(self, path: str) -> Dict[int, str]:
        self.reads.append(path)
        if path not in self.files:
            raise RankTableError("no such hccn.conf", path=path)
        return self.files[path]

    def exists(self, path: str) -> bool:
        return path in self.files


def host(name: str, slots: int = 8, **kw: Any) -> Host:
    return Host(name=name, slots=slots, source=f"c.yaml:{kw.pop('line', 3)}", **kw)


@pytest.mark.parametrize(
    "h, hccn_dir, hccn_files, files, expected_read",
    [
        # 1. --hccn wins over everything
        (
            host("a", hccn_conf="/y/a.conf", device_ips=tuple(ips(9).items())),
            "/d",
            {"a": "/x/a"},
            {"/x/a": ips(1), "/y/a.conf": ips(2), "/d/a.conf": ips(3)},
            "/x/a",
        ),
        # 2. then the YAML hccn_conf
        (
            host("a", hccn_conf="/y/a.conf", device_ips=tuple(ips(9).items())),
            "/d",
            {},
            {"/y/a.conf": ips(2), "/d/a.conf": ips(3)},
            "/y/a.conf",
        ),
        # 3. then <dir>/<host>.conf ...
        (host("a", device_ips=tuple(ips(9).items())), "/d", {}, {"/d/a.conf": ips(3)}, "/d/a.conf"),
        # ... or <dir>/<host>
        (host("a"), "/d", {}, {"/d/a": ips(3)}, "/d/a"),
    ],
)
def test_resolve_priority(h: Host, hccn_dir: str, hccn_files: dict, files: dict, expected_read: str) -> None:
    fs = FakeFs(files)
    result = resolve_device_ips(
        Inventory((h,)), hccn_dir=hccn_dir, hccn_files=hccn_files, read=fs.read, exists=fs.exists
    )
    assert fs.reads == [expected_read]
    assert result == {"a": files[expected_read]}


def test_resolve_falls_back_to_yaml_device_ips() -> None:
    fs = FakeFs({})
    h = host("a", slots=2, device_ips=((0, "1.1.1.1"), (1, "1.1.1.2"), (5, "1.1.1.6")))
    assert resolve_device_ips(Inventory((h,)), hccn_dir="/d", read=fs.read, exists=fs.exists) == {
        "a": {0: "1.1.1.1", 1: "1.1.1.2"}
    }
    assert fs.reads == []


def test_resolve_keeps_only_the_hosts_devices_in_device_order() -> None:
    fs = FakeFs({"/d/a.conf": ips(1)})
    h = host("a", slots=3, devices=(6, 4, 5))
    result = resolve_device_ips(Inventory((h,)), hccn_dir="/d", read=fs.read, exists=fs.exists)
    assert list(result["a"].items()) == [(6, ips(1)[6]), (4, ips(1)[4]), (5, ips(1)[5])]


def test_resolve_reads_real_files() -> None:
    inv = parse_hostfile(data("hosts_2x8"))
    assert resolve_device_ips(
        inv, hccn_files={"10.0.0.2": os.path.join(HCCN_DIR, "10.0.0.1.conf")}, hccn_dir=HCCN_DIR
    ) == {
        "10.0.0.1": {i: f"192.{i % 4 + 1}.27.{6 + i // 4}" for i in range(8)},
        "10.0.0.2": {i: f"192.{i % 4 + 1}.27.{6 + i // 4}" for i in range(8)},
    }


@pytest.mark.parametrize(
    "hosts, hccn_dir, hccn_files, files, message",
    [
        (
            [host("a")],
            None,
            {},
            {},
            "c.yaml:3: host 'a' has no device IPs; pass --hccn a=PATH or --hccn-dir DIR holding DIR/a.conf, "
            "or give it 'hccn_conf:' or 'device_ips:' in a YAML cluster file",
        ),
        (
            [host("a")],
            "/d",
            {},
            {},
            "c.yaml:3: host 'a' has no device IPs (looked for /d/a and /d/a.conf); pass --hccn a=PATH or "
            "--hccn-dir DIR holding DIR/a.conf, or give it 'hccn_conf:' or 'device_ips:' in a YAML cluster file",
        ),
        (
            [Host(name="b", slots=1, source="-H entry 1")],
            None,
            {},
            {},
            "-H entry 1: host 'b' has no device IPs; pass --hccn b=PATH or --hccn-dir DIR holding DIR/b.conf, "
            "or give it 'hccn_conf:' or 'device_ips:' in a YAML cluster file",
        ),
        (
            [host("a")],
            "/d",
            {},
            {"/d/a": ips(1), "/d/a.conf": ips(1)},
            "--hccn-dir: both /d/a and /d/a.conf exist for host 'a'; keep one of them",
        ),
        ([host("a")], None, {"z": "/z"}, {}, "--hccn: --hccn names host 'z', which is not in the inventory (a)"),
        (
            [host("a")],
            "/d",
            {},
            {"/d/a.conf": ips(1, range(7))},
            "/d/a.conf: host 'a': device 7 has no address in /d/a.conf; add address_7=<IP> to it, "
            "or leave the device out with --exclude a:7",
        ),
        (
            [host("a")],
            None,
            {"a": "/x"},
            {"/x": ips(1, range(7))},
            "/x: host 'a': device 7 has no address in /x (--hccn a=...); add address_7=<IP> to it, "
            "or leave the device out with --exclude a:7",
        ),
        (
            [host("a", slots=2, device_ips=((0, "1.1.1.1"),))],
            None,
            {},
            {},
            "c.yaml:3: host 'a': device 1 has no address in device_ips of host 'a'; add \"1\": <IP> to its "
            "device_ips, or leave the device out with --exclude a:1",
        ),
        ([host("a")], None, {"a": "/missing"}, {}, "/missing: no such hccn.conf"),
    ],
)
def test_resolve_errors(
    hosts: List[Host], hccn_dir: Optional[str], hccn_files: dict, files: dict, message: str
) -> None:
    fs = FakeFs(files)
    with pytest.raises(RankTableError) as info:
        resolve_device_ips(
            Inventory(tuple(hosts)), hccn_dir=hccn_dir, hccn_files=hccn_files, read=fs.read, exists=fs.exists
        )
    assert str(info.value) == message


# --------------------------------------------------------------------------------------------
# build_rank_table


def build(hosts: Sequence[Host], version: str = "1.0") -> Dict[str, Any]:
    inv = Inventory(tuple(hosts))
    device_ips = {
        h.name: {d: ips(i + 1)[d % 8] for d in h.device_ids} for i, h in enumerate(sorted(hosts, key=lambda h: h.name))
    }
    return build_rank_table(inv, device_ips, version=version)


def test_lexicographic_server_order() -> None:
    # String order: "10.0.0.10" < "10.0.0.9"; ranks follow that order, not the inventory's.
    inv = parse_hostfile("10.0.0.9 slots=2\n10.0.0.10 slots=2\n")
    table = build_rank_table(inv, {"10.0.0.9": {0: "1.0.0.1", 1: "1.0.0.2"}, "10.0.0.10": {0: "2.0.0.1", 1: "2.0.0.2"}})
    assert table == v10(
        [("10.0.0.10", [(0, "2.0.0.1"), (1, "2.0.0.2")]), ("10.0.0.9", [(0, "1.0.0.1"), (1, "1.0.0.2")])]
    )
    assert [d["rank_id"] for s in table["server_list"] for d in s["device"]] == ["0", "1", "2", "3"]
    assert validate_rank_table(table, chip="910b") == []


def test_build_uses_server_id_and_device_order() -> None:
    h = Host(name="node-b", slots=4, devices=(7, 6, 5, 4), server_id="10.0.0.2")
    g = Host(name="node-a", slots=4, devices=(4, 5, 6, 7), server_id="10.0.0.3")
    table = build_rank_table(
        Inventory((g, h)),
        {"node-a": {d: f"3.0.0.{d}" for d in range(4, 8)}, "node-b": {d: f"2.0.0.{d}" for d in range(4, 8)}},
    )
    assert table == v10(
        [
            ("10.0.0.2", [(7, "2.0.0.7"), (6, "2.0.0.6"), (5, "2.0.0.5"), (4, "2.0.0.4")]),
            ("10.0.0.3", [(4, "3.0.0.4"), (5, "3.0.0.5"), (6, "3.0.0.6"), (7, "3.0.0.7")]),
        ]
    )


def test_build_every_value_is_a_string() -> None:
    table = build([host("a"), host("b")])

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)
        else:
            assert isinstance(value, str), value

    walk(table)


A3_YAML = """\
defaults: {slots: 2}
hosts:
  - host: n10
    host_ip: 172.16.10.1
    super_pod_id: "10"
    device_ips: {0: 10.10.0.1, 1: 10.10.0.2}
    super_device_ids: {0: "100", 1: "101"}
  - host: n2b
    host_ip: 172.16.2.2
    super_pod_id: "2"
    device_ips: {0: 10.2.1.1, 1: 10.2.1.2}
    super_device_ids: {0: "3", 1: "4"}
  - host: n2a
    host_ip: 172.16.2.1
    super_pod_id: "2"
    device_ips: {0: 10.2.0.1, 1: 10.2.0.2}
    super_device_ids: {0: "1", 1: "2"}
"""


def a3_device(did: str, sdid: str, ip: str, rank: str) -> Dict[str, str]:
    return {"device_id": did, "super_device_id": sdid, "device_ip": ip, "rank_id": rank}


A3_TABLE = {
    "version": "1.2",
    "server_count": "3",
    "server_list": [
        {
            "server_id": "n2a",
            "host_ip": "172.16.2.1",
            "device": [a3_device("0", "1", "10.2.0.1", "0"), a3_device("1", "2", "10.2.0.2", "1")],
        },
        {
            "server_id": "n2b",
            "host_ip": "172.16.2.2",
            "device": [a3_device("0", "3", "10.2.1.1", "2"), a3_device("1", "4", "10.2.1.2", "3")],
        },
        {
            "server_id": "n10",
            "host_ip": "172.16.10.1",
            "device": [a3_device("0", "100", "10.10.0.1", "4"), a3_device("1", "101", "10.10.0.2", "5")],
        },
    ],
    "super_pod_list": [
        {"super_pod_id": "2", "server_list": [{"server_id": "n2a"}, {"server_id": "n2b"}]},
        {"super_pod_id": "10", "server_list": [{"server_id": "n10"}]},
    ],
    "status": "completed",
}


def a3_inventory() -> Inventory:
    return parse_cluster_yaml(A3_YAML, path="a3.yaml")


def test_build_v12() -> None:
    # Pods in natural order ("2" before "10"), servers of a pod together, string order inside a pod.
    inv = a3_inventory()
    table = build_rank_table(inv, resolve_device_ips(inv), version="1.2")
    assert table == A3_TABLE
    assert validate_rank_table(table) == []
    assert list(table) == ["version", "server_count", "server_list", "super_pod_list", "status"]


def test_build_v12_default_pod() -> None:
    h = Host(name="n", slots=1, host_ip="1.1.1.1", super_device_ids=((0, "7"),))
    table = build_rank_table(Inventory((h,)), {"n": {0: "2.2.2.2"}}, version="1.2")
    assert table["super_pod_list"] == [{"super_pod_id": "0", "server_list": [{"server_id": "n"}]}]
    assert validate_rank_table(table) == []


@pytest.mark.parametrize(
    "hosts, version, message",
    [
        (
            [host("a")],
            "2.0",
            "--version: unknown rank table version '2.0'; use 1.0 (Ascend 910/910B) or 1.2 (Atlas A3 SuperPoD)",
        ),
        (
            [host("a"), host("b", server_id="a", line=9)],
            "1.0",
            "c.yaml:9: hosts 'a' and 'b' have the same server_id 'a'; give each its own server_id",
        ),
        (
            [host("a", super_device_ids=tuple((d, str(d)) for d in range(8)))],
            "1.2",
            "c.yaml:3: host 'a' has no host_ip; rank table 1.2 needs one per server: add 'host_ip: <address>' "
            "to its entry in the cluster YAML",
        ),
        (
            [host("a", host_ip="1.1.1.1", super_device_ids=tuple((d, str(d)) for d in range(7)))],
            "1.2",
            "c.yaml:3: host 'a': device 7 has no super_device_id; rank table 1.2 needs one per device: add "
            '"7": <id> to its super_device_ids in the cluster YAML (npu-smi info -t spod-info prints it)',
        ),
    ],
)
def test_build_errors(hosts: List[Host], version: str, message: str) -> None:
    with pytest.raises(RankTableError) as info:
        build(hosts, version)
    assert str(info.value) == message


def test_build_missing_device_ip() -> None:
    with pytest.raises(RankTableError) as info:
        build_rank_table(Inventory((host("a", slots=2),)), {"a": {0: "1.1.1.1"}})
    assert str(info.value) == "c.yaml:3: host 'a': device 1 has no device IP"
    with pytest.raises(RankTableError) as info:
        build_rank_table(Inventory((host("a", slots=2),)), {})
    assert str(info.value) == "c.yaml:3: no device IPs for host 'a'"


# --------------------------------------------------------------------------------------------
# merge


def single(n: int) -> Dict[str, Any]:
    inv = parse_hostfile(f"10.0.0.{n} slots=8\n")
    return build_rank_table(inv, resolve_device_ips(inv, hccn_dir=HCCN_DIR))


def test_merge_equals_generating_the_two_host_table() -> None:
    expected = seed(16)
    assert merge_rank_tables([("a.json", single(1)), ("b.json", single(2))]) == expected
    assert merge_rank_tables([("b.json", single(2)), ("a.json", single(1))]) == expected
    assert rank_table_json(merge_rank_tables([("b.json", single(2)), ("a.json", single(1))])) == data(
        "golden/rank_table_16pcs.json"
    )


def test_merge_does_not_touch_its_inputs() -> None:
    a, b = single(1), single(2)
    before = copy.deepcopy((a, b))
    merge_rank_tables([("b", b), ("a", a)])
    assert (a, b) == before


def test_merge_multi_server_inputs_and_status() -> None:
    t1 = v10([("s3", [(d, f"3.0.0.{d}") for d in range(8)]), ("s1", [(d, f"1.0.0.{d}") for d in range(8)])])
    t2 = v10([("s2", [(d, f"2.0.0.{d}") for d in range(8)])], status="initializing")
    merged = merge_rank_tables([("t1", t1), ("t2", t2)])
    assert [s["server_id"] for s in merged["server_list"]] == ["s1", "s2", "s3"]
    assert [d["rank_id"] for s in merged["server_list"] for d in s["device"]] == [str(r) for r in range(24)]
    assert merged["server_count"] == "3"
    assert merged["status"] == "initializing"


def test_merge_v12() -> None:
    tables = []
    for server in A3_TABLE["server_list"]:
        pod = next(
            p["super_pod_id"]
            for p in A3_TABLE["super_pod_list"]
            if {"server_id": server["server_id"]} in p["server_list"]
        )
        tables.append(
            (
                f"{server['server_id']}.json",
                {
                    "version": "1.2",
                    "server_count": "1",
                    "server_list": [server],
                    "super_pod_list": [{"super_pod_id": pod, "server_list": [{"server_id": server["server_id"]}]}],
                    "status": "completed",
                },
            )
        )
    assert merge_rank_tables(list(reversed(tables))) == A3_TABLE


@pytest.mark.parametrize(
    "tables, message",
    [
        ([], "nothing to merge; pass at least one rank table"),
        (
            [("a.json", single(1)), ("b.json", single(1))],
            "b.json: server_list[0].server_id: server_id '10.0.0.1' is in both a.json and b.json; "
            "each server belongs in one table",
        ),
        (
            [("a.json", single(1)), ("b.json", dict(single(2), version="1.2"))],
            "b.json: version: version 1.2 cannot be merged with version 1.0 of a.json; "
            "regenerate the tables with one --version",
        ),
        ([("a.json", [])], "a.json: not a rank table: the top level must be a JSON object"),
        ([("a.json", dict(single(1), version=1))], 'a.json: version: version must be "1.0" or "1.2", got number 1'),
        ([("a.json", dict(single(1), server_list=[]))], "a.json: server_list: must be a non-empty list of servers"),
        (
            [("a.json", dict(single(1), server_list=[{"server_id": 5}]))],
            "a.json: server_list[0].server_id: must be a string, got number 5",
        ),
        (
            [("a.json", dict(single(1), server_list=[{"server_id": "x", "device": [1]}]))],
            "a.json: server_list[0].device: must be a list of device objects",
        ),
        (
            [("a.json", dict(A3_TABLE, super_pod_list=[]))],
            "a.json: server_list[0].server_id: server 'n2a' is in no super_pod_list entry",
        ),
        ([("a.json", dict(A3_TABLE, super_pod_list={}))], "a.json: super_pod_list: must be a list (rank table 1.2)"),
        (
            [
                ("a.json", v10([("s1", [(0, "1.1.1.1"), (1, "1.1.1.2"), (2, "1.1.1.3"), (3, "1.1.1.4")])])),
                ("b.json", v10([("s2", [(0, "2.1.1.1"), (1, "2.1.1.2"), (2, "2.1.1.3"), (3, "2.1.1.4")])])),
            ],
            "the merged rank table is invalid: server_list[0].device: a multi-server Ascend 910 job needs 8 devices "
            "on every server, got 4 (--chip 910b allows 1-8); server_list[1].device: a multi-server Ascend 910 job "
            "needs 8 devices on every server, got 4 (--chip 910b allows 1-8)",
        ),
    ],
)
def test_merge_errors(tables: list, message: str) -> None:
    with pytest.raises(RankTableError) as info:
        merge_rank_tables(tables)
    assert str(info.value) == message


def test_merge_chip_910b_allows_4_devices_per_server() -> None:
    a = v10([("s1", [(0, "1.1.1.1"), (1, "1.1.1.2"), (2, "1.1.1.3"), (3, "1.1.1.4")])])
    b = v10([("s2", [(0, "2.1.1.1"), (1, "2.1.1.2"), (2, "2.1.1.3"), (3, "2.1.1.4")])])
    merged = merge_rank_tables([("b", b), ("a", a)], chip="910b")
    assert table_size(merged) == (2, 8)


def test_check_rank_table_quotes_five_problems() -> None:
    table = seed(16)
    for dev in table["server_list"][0]["device"]:
        dev["device_ip"] = "x"
    with pytest.raises(RankTableError) as info:
        check_rank_table(table, what="thing")
    assert str(info.value).startswith(
        "the thing is invalid: server_list[0].device[0].device_ip: 'x' is not an IPv4 address; "
    )
    assert str(info.value).endswith(" (and 3 more)")


# --------------------------------------------------------------------------------------------
# validate


def S(i: int) -> Dict[str, Any]:  # noqa: N802 - reads like a path in the table below
    return {"server": i}


Mutation = Callable[[Dict[str, Any]], Any]


def set_in(path: Sequence[Any], value: Any) -> Mutation:
    def mutate(t: Dict[str, Any]) -> None:
        obj: Any = t
        for key in path[:-1]:
            obj = obj[key]
        obj[path[-1]] = value

    return mutate


def delete(path: Sequence[Any]) -> Mutation:
    def mutate(t: Dict[str, Any]) -> None:
        obj: Any = t
        for key in path[:-1]:
            obj = obj[key]
        del obj[path[-1]]

    return mutate


def renumber(t: Dict[str, Any]) -> None:
    rank = 0
    for s in t["server_list"]:
        for d in s["device"]:
            d["rank_id"] = str(rank)
            rank += 1


def swap_servers(t: Dict[str, Any]) -> None:
    t["server_list"].reverse()
    renumber(t)


def swap_rank_blocks(t: Dict[str, Any]) -> None:
    for s, offset in ((0, 8), (1, -8)):
        for d in t["server_list"][s]["device"]:
            d["rank_id"] = str(int(d["rank_id"]) + offset)


def swap_first_ranks(t: Dict[str, Any]) -> None:
    devs = t["server_list"][0]["device"]
    devs[0]["rank_id"], devs[1]["rank_id"] = devs[1]["rank_id"], devs[0]["rank_id"]


DEV = ["server_list", 0, "device"]
DEV1 = ["server_list", 1, "device"]

# (case id, base table, mutation, chip, expected violations as "path: message")
VALIDATE_CASES: List[Tuple[str, Callable[[], Any], Optional[Mutation], str, List[str]]] = [
    ("not an object", lambda: [], None, "910", ["$: a rank table must be a JSON object, got a list"]),
    (
        "int rank_id",
        lambda: seed(16),
        set_in(DEV + [0, "rank_id"], 0),
        "910",
        ['server_list[0].device[0].rank_id: must be a JSON string, got number 0 (write "0")'],
    ),
    (
        "int server_count",
        lambda: seed(16),
        set_in(["server_count"], 2),
        "910",
        ['server_count: must be a JSON string, got number 2 (write "2")'],
    ),
    (
        "int device_id",
        lambda: seed(16),
        set_in(DEV1 + [3, "device_id"], 3),
        "910",
        ['server_list[1].device[3].device_id: must be a JSON string, got number 3 (write "3")'],
    ),
    (
        "null device_ip",
        lambda: seed(8),
        set_in(DEV + [2, "device_ip"], None),
        "910",
        ["server_list[0].device[2].device_ip: must be a JSON string, got null"],
    ),
    (
        "int host_nic_ip",
        lambda: seed(8),
        set_in(["server_list", 0, "host_nic_ip"], 0),
        "910",
        ['server_list[0].host_nic_ip: must be a JSON string, got number 0 (write "0")'],
    ),
    ("missing version", lambda: seed(8), delete(["version"]), "910", ["version: missing required field"]),
    ("missing status", lambda: seed(8), delete(["status"]), "910", ["status: missing required field"]),
    (
        "missing server_count",
        lambda: seed(8),
        delete(["server_count"]),
        "910",
        ["server_count: missing required field"],
    ),
    ("missing server_list", lambda: seed(8), delete(["server_list"]), "910", ["server_list: missing required field"]),
    (
        "missing server_id",
        lambda: seed(16),
        delete(["server_list", 1, "server_id"]),
        "910",
        ["server_list[1].server_id: missing required field"],
    ),
    (
        "missing device",
        lambda: seed(8),
        delete(["server_list", 0, "device"]),
        "910",
        ["server_list[0].device: missing required field"],
    ),
    (
        "missing device_id",
        lambda: seed(8),
        delete(DEV + [5, "device_id"]),
        "910",
        ["server_list[0].device[5].device_id: missing required field"],
    ),
    (
        "missing device_ip",
        lambda: seed(8),
        delete(DEV + [5, "device_ip"]),
        "910",
        ["server_list[0].device[5].device_ip: missing required field"],
    ),
    (
        "missing rank_id",
        lambda: seed(8),
        delete(DEV + [5, "rank_id"]),
        "910",
        ["server_list[0].device[5].rank_id: missing required field"],
    ),
    (
        "bad version",
        lambda: seed(8),
        set_in(["version"], "1.1"),
        "910",
        ['version: must be "1.0" or "1.2", got \'1.1\''],
    ),
    (
        "bad status",
        lambda: seed(8),
        set_in(["status"], "done"),
        "910",
        ['status: must be "completed" or "initializing", got \'done\''],
    ),
    ("status initializing is fine", lambda: seed(8), set_in(["status"], "initializing"), "910", []),
    (
        "server_count mismatch",
        lambda: seed(16),
        set_in(["server_count"], "3"),
        "910",
        ["server_count: is 3 but server_list has 2 servers"],
    ),
    (
        "server_count not a number",
        lambda: seed(16),
        set_in(["server_count"], "two"),
        "910",
        ["server_count: must be a non-negative integer in a string, got 'two'"],
    ),
    (
        "empty server_list",
        lambda: seed(16),
        set_in(["server_list"], []),
        "910",
        [
            "server_list: is empty; a rank table needs at least one server",
            "server_count: is 2 but server_list has 0 servers",
        ],
    ),
    (
        "server_list not a list",
        lambda: seed(8),
        set_in(["server_list"], {}),
        "910",
        ["server_list: must be a list of servers, got an object"],
    ),
    (
        "server not an object",
        lambda: seed(8),
        set_in(["server_list", 0], "10.0.0.1"),
        "910",
        ["server_list[0]: must be an object, got '10.0.0.1'"],
    ),
    (
        "device not a list",
        lambda: seed(8),
        set_in(["server_list", 0, "device"], {}),
        "910",
        ["server_list[0].device: must be a list of devices, got an object"],
    ),
    (
        "device entry not an object",
        lambda: seed(8),
        set_in(DEV + [7], 7),
        "910",
        ["server_list[0].device[7]: must be an object, got number 7"],
    ),
    (
        "duplicate rank",
        lambda: seed(16),
        set_in(DEV1 + [0, "rank_id"], "7"),
        "910",
        [
            "server_list[1].device[0].rank_id: rank_id 7 is also server_list[0].device[7].rank_id",
            "server_list: rank ids must cover 0..15; missing 8",
            "server_list[1].device[0].rank_id: ranks must continue in server order: server_list[0] ends at 7, "
            "so this server starts at 8, got 7",
            "server_list[1].device[1].rank_id: rank ids within a server must be consecutive: expected 8 after 7, got 9",
        ],
    ),
    (
        "rank outside 0..N-1",
        lambda: seed(16),
        set_in(DEV1 + [7, "rank_id"], "16"),
        "910",
        [
            "server_list[1].device[7].rank_id: rank_id 16 is outside 0..15 (the table has 16 devices)",
            "server_list: rank ids must cover 0..15; missing 15",
            "server_list[1].device[7].rank_id: rank ids within a server must be consecutive: expected 15 after 14, got "
            "16",
        ],
    ),
    (
        "rank not a number",
        lambda: seed(8),
        set_in(DEV + [1, "rank_id"], "01"),
        "910",
        ["server_list[0].device[1].rank_id: must be a rank number in a string, e.g. \"0\", got '01'"],
    ),
    (
        "ranks not contiguous within a server",
        lambda: seed(16),
        swap_first_ranks,
        "910",
        [
            "server_list[0].device[0].rank_id: the first server's ranks must start at 0, got 1",
            "server_list[0].device[1].rank_id: rank ids within a server must be consecutive: expected 2 after 1, got 0",
        ],
    ),
    (
        "ranks not increasing in server order",
        lambda: seed(16),
        swap_rank_blocks,
        "910",
        [
            "server_list[0].device[0].rank_id: the first server's ranks must start at 0, got 8",
            "server_list[1].device[0].rank_id: ranks must continue in server order: server_list[0] ends at 15, "
            "so this server starts at 16, got 0",
        ],
    ),
    (
        "servers not in lexicographic order",
        lambda: seed(16),
        swap_servers,
        "910",
        [
            "server_list[1].server_id: servers must be in lexicographic order of server_id: '10.0.0.1' sorts before "
            "'10.0.0.2' (server_list[0])",
        ],
    ),
    (
        "string order, not numeric",
        lambda: v10([("10.0.0.9", [(0, "1.1.1.1")]), ("10.0.0.10", [(0, "1.1.1.2")])]),
        None,
        "910b",
        [
            "server_list[1].server_id: servers must be in lexicographic order of server_id: '10.0.0.10' sorts before "
            "'10.0.0.9' (server_list[0])",
        ],
    ),
    (
        "duplicate server_id",
        lambda: seed(16),
        set_in(["server_list", 1, "server_id"], "10.0.0.1"),
        "910",
        ["server_list[1].server_id: server_id '10.0.0.1' is also server_list[0]"],
    ),
    (
        "empty server_id",
        lambda: seed(8),
        set_in(["server_list", 0, "server_id"], ""),
        "910",
        ["server_list[0].server_id: is empty"],
    ),
    (
        "910: 3 devices",
        lambda: one_server([0, 1, 2]),
        None,
        "910",
        ["server_list[0].device: an Ascend 910 server takes 1, 2, 4 or 8 devices, got 3 (--chip 910b allows 1-8)"],
    ),
    ("910b: 3 devices is fine", lambda: one_server([0, 1, 2]), None, "910b", []),
    (
        "910: 4 devices mixing 0-3 and 4-7",
        lambda: one_server([2, 3, 4, 5]),
        None,
        "910",
        [
            "server_list[0].device: devices [2, 3, 4, 5] mix devices 0-3 and 4-7, two separate networks on Ascend 910; "
            "use devices from one group"
        ],
    ),
    (
        "910: 2 devices mixing",
        lambda: one_server([3, 4]),
        None,
        "910",
        [
            "server_list[0].device: devices [3, 4] mix devices 0-3 and 4-7, two separate networks on Ascend 910; "
            "use devices from one group"
        ],
    ),
    ("910b: mixing is fine", lambda: one_server([3, 4]), None, "910b", []),
    (
        "910: multi-server with 4 devices",
        lambda: v10([("a", [(d, f"1.1.1.{d}") for d in range(4)]), ("b", [(d, f"1.1.2.{d}") for d in range(4)])]),
        None,
        "910",
        [
            "server_list[0].device: a multi-server Ascend 910 job needs 8 devices on every server, got 4 (--chip 910b "
            "allows 1-8)",
            "server_list[1].device: a multi-server Ascend 910 job needs 8 devices on every server, got 4 (--chip 910b "
            "allows 1-8)",
        ],
    ),
    (
        "910b: 9 devices",
        lambda: one_server(range(9)),
        None,
        "910b",
        [
            "server_list[0].device[8].device_id: device 8 is out of range 0..7",
            "server_list[0].device: an Ascend 910B server takes 1 to 8 devices, got 9",
        ],
    ),
    (
        "empty device list",
        lambda: seed(8),
        set_in(["server_list", 0, "device"], []),
        "910",
        ["server_list[0].device: is empty; a server needs at least one device"],
    ),
    (
        "duplicate device id",
        lambda: seed(8),
        set_in(DEV + [6, "device_id"], "1"),
        "910",
        ["server_list[0].device[6].device_id: device 1 is also server_list[0].device[1]"],
    ),
    (
        "duplicate device IP in a server",
        lambda: seed(8),
        set_in(DEV + [6, "device_ip"], "192.1.27.6"),
        "910",
        ["server_list[0].device[6].device_ip: device IP 192.1.27.6 is also used by server_list[0].device[0]"],
    ),
    (
        "duplicate device IP across servers",
        lambda: seed(16),
        set_in(DEV1 + [0, "device_ip"], "192.1.27.6"),
        "910",
        ["server_list[1].device[0].device_ip: device IP 192.1.27.6 is also used by server_list[0].device[0]"],
    ),
    (
        "invalid IPv4",
        lambda: seed(8),
        set_in(DEV + [3, "device_ip"], "192.4.27.256"),
        "910",
        ["server_list[0].device[3].device_ip: '192.4.27.256' is not an IPv4 address"],
    ),
    (
        "device id not a number",
        lambda: seed(8),
        set_in(DEV + [3, "device_id"], "three"),
        "910",
        ["server_list[0].device[3].device_id: must be a device number in a string, e.g. \"0\", got 'three'"],
    ),
    (
        "device id out of range",
        lambda: seed(8),
        set_in(DEV + [3, "device_id"], "8"),
        "910",
        ["server_list[0].device[3].device_id: device 8 is out of range 0..7"],
    ),
    # version 1.2
    (
        "v1.2 missing host_ip",
        lambda: copy.deepcopy(A3_TABLE),
        delete(["server_list", 2, "host_ip"]),
        "910",
        ["server_list[2].host_ip: missing required field"],
    ),
    (
        "v1.2 missing super_device_id",
        lambda: copy.deepcopy(A3_TABLE),
        delete(["server_list", 1, "device", 0, "super_device_id"]),
        "910",
        ["server_list[1].device[0].super_device_id: missing required field"],
    ),
    (
        "v1.2 bad super_device_id",
        lambda: copy.deepcopy(A3_TABLE),
        set_in(["server_list", 1, "device", 0, "super_device_id"], "x"),
        "910",
        ["server_list[1].device[0].super_device_id: must be a number in a string, got 'x'"],
    ),
    (
        "v1.2 int device_port",
        lambda: copy.deepcopy(A3_TABLE),
        set_in(["server_list", 1, "device", 0, "device_port"], 16666),
        "910",
        ['server_list[1].device[0].device_port: must be a JSON string, got number 16666 (write "16666")'],
    ),
    ("v1.2 server_count optional", lambda: copy.deepcopy(A3_TABLE), delete(["server_count"]), "910", []),
    (
        "v1.2 missing super_pod_list",
        lambda: copy.deepcopy(A3_TABLE),
        delete(["super_pod_list"]),
        "910",
        ["super_pod_list: missing required field (rank table 1.2 lists the SuperPoD of every server)"],
    ),
    (
        "v1.2 server in no pod",
        lambda: copy.deepcopy(A3_TABLE),
        set_in(["super_pod_list", 1, "server_list"], []),
        "910",
        [
            "super_pod_list[1].server_list: is empty",
            "server_list[2].server_id: server 'n10' is in no super_pod_list entry",
        ],
    ),
    (
        "v1.2 server in two pods",
        lambda: copy.deepcopy(A3_TABLE),
        set_in(["super_pod_list", 1, "server_list"], [{"server_id": "n10"}, {"server_id": "n2a"}]),
        "910",
        ["super_pod_list[1].server_list[1].server_id: server 'n2a' is already in super_pod_list[0]"],
    ),
    (
        "v1.2 unknown server in a pod",
        lambda: copy.deepcopy(A3_TABLE),
        set_in(["super_pod_list", 1, "server_list", 0, "server_id"], "n99"),
        "910",
        [
            "super_pod_list[1].server_list[0].server_id: server 'n99' is not in server_list",
            "server_list[2].server_id: server 'n10' is in no super_pod_list entry",
        ],
    ),
    (
        "v1.2 duplicate pod id",
        lambda: copy.deepcopy(A3_TABLE),
        set_in(["super_pod_list", 1, "super_pod_id"], "2"),
        "910",
        [
            "super_pod_list[1].super_pod_id: SuperPoD '2' is also super_pod_list[0]",
            # both entries now describe pod "2", so n10 is checked in order within it
            "server_list[2].server_id: servers must be in lexicographic order of server_id within SuperPoD '2': "
            "'n10' sorts before 'n2b' (server_list[1])",
        ],
    ),
    (
        "v1.2 pod servers not together",
        lambda: copy.deepcopy(A3_TABLE),
        set_in(
            ["super_pod_list"],
            [
                {"super_pod_id": "2", "server_list": [{"server_id": "n2a"}, {"server_id": "n10"}]},
                {"super_pod_id": "10", "server_list": [{"server_id": "n2b"}]},
            ],
        ),
        "910",
        [
            "server_list[2]: servers of SuperPoD '2' must be listed together (server_list[0] is in it too)",
            "server_list[2].server_id: servers must be in lexicographic order of server_id within SuperPoD '2': "
            "'n10' sorts before 'n2a' (server_list[0])",
        ],
    ),
    (
        "v1.2 order within a pod",
        lambda: copy.deepcopy(A3_TABLE),
        lambda t: (t["server_list"].insert(0, t["server_list"].pop(1)), renumber(t)),
        "910",
        [
            "server_list[1].server_id: servers must be in lexicographic order of server_id within SuperPoD '2': "
            "'n2a' sorts before 'n2b' (server_list[0])"
        ],
    ),
    (
        "v1.2 16 devices per server",
        lambda: {
            "version": "1.2",
            "server_count": "1",
            "status": "completed",
            "server_list": [
                {
                    "server_id": "s",
                    "host_ip": "1.1.1.1",
                    "device": [a3_device(str(d), str(d), f"10.0.0.{d}", str(d)) for d in range(16)],
                }
            ],
            "super_pod_list": [{"super_pod_id": "0", "server_list": [{"server_id": "s"}]}],
        },
        None,
        "910",
        [],
    ),
]


@pytest.mark.parametrize("case", VALIDATE_CASES, ids=[c[0] for c in VALIDATE_CASES])
def test_validate(case: tuple) -> None:
    _name, base, mutate, chip, expected = case
    table = base()
    if mutate is not None:
        mutate(table)
    assert [str(v) for v in validate_rank_table(table, chip=chip)] == expected


@pytest.mark.parametrize(
    "table, chip",
    [
        (one_server([0]), "910"),
        (one_server([7]), "910"),
        (one_server([0, 1]), "910"),
        (one_server([4, 5]), "910"),
        (one_server([0, 1, 2, 3]), "910"),
        (one_server([4, 5, 6, 7]), "910"),
        (one_server(range(8)), "910"),
        (seed(8), "910"),
        (seed(16), "910"),
        (seed(16), "910b"),
        (one_server([0, 1, 2, 3, 4]), "910b"),
        (A3_TABLE, "910"),
        (A3_TABLE, "910b"),
    ],
)
def test_validate_accepts(table: Any, chip: str) -> None:
    assert validate_rank_table(table, chip=chip) == []


def test_validate_reports_several_problems_at_once() -> None:
    table = seed(16)
    table["status"] = "ready"
    table["server_list"][0]["device"][2]["device_ip"] = "1.2.3"
    table["server_list"][1]["device"][4]["rank_id"] = 12
    del table["server_list"][1]["device"][5]["device_id"]
    assert validate_rank_table(table) == [
        Violation("status", 'must be "completed" or "initializing", got \'ready\''),
        Violation("server_list[0].device[2].device_ip", "'1.2.3' is not an IPv4 address"),
        Violation("server_list[1].device[4].rank_id", 'must be a JSON string, got number 12 (write "12")'),
        Violation("server_list[1].device[5].device_id", "missing required field"),
    ]


def test_validate_unknown_chip() -> None:
    with pytest.raises(RankTableError) as info:
        validate_rank_table(seed(8), chip="310")
    assert str(info.value) == "--chip: unknown chip '310'; use one of 910, 910b"


def test_validate_does_not_mutate() -> None:
    table = seed(16)
    table["server_list"].reverse()
    before = copy.deepcopy(table)
    validate_rank_table(table)
    assert table == before


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=12),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4),
    max_leaves=30,
)


@settings(max_examples=examples(400), deadline=None)
@given(json_values)
def test_validate_never_raises_on_any_json_value(value: Any) -> None:
    """Any JSON value: validated as it is and as its JSON text parses (the parser may refuse it with
    its own error), and the fast renderer writes it as json.dumps(indent=2) does (one drawn value
    for the three properties)."""
    result = validate_rank_table(value)
    assert all(isinstance(v, Violation) for v in result)
    # the parse of its text, then validated
    try:
        parsed = parse_rank_table_json(json.dumps(value), "t.json")
    except MsLaunchError:
        pass  # e.g. a key repeated after JSON-encoding
    else:
        validate_rank_table(parsed)
    # the fast renderer
    from launcher.planning.text.jsontext import _render

    parts: List[str] = []
    _render(value, "", parts)
    assert "".join(parts) == json.dumps(value, indent=2)


_text_or_junk = st.one_of(
    st.text(max_size=10),
    st.sampled_from(["0", "1", "7", "8", "15", "01", "-1", "192.1.27.6", "1.2.3", ""]),
    st.integers(-2, 20),
    st.none(),
    st.booleans(),
    st.lists(st.integers(), max_size=2),
)
_device = st.dictionaries(
    st.sampled_from(["device_id", "device_ip", "rank_id", "super_device_id", "device_port", "x"]),
    _text_or_junk,
    max_size=5,
)
_server = st.dictionaries(
    st.sampled_from(["server_id", "device", "host_nic_ip", "host_ip"]),
    st.one_of(_text_or_junk, st.lists(_device | _text_or_junk, max_size=9)),
    max_size=4,
)
_pod = st.dictionaries(
    st.sampled_from(["super_pod_id", "server_list"]),
    st.one_of(
        _text_or_junk, st.lists(st.dictionaries(st.just("server_id"), _text_or_junk) | _text_or_junk, max_size=3)
    ),
)
_table = st.fixed_dictionaries(
    {},
    optional={
        "version": st.sampled_from(["1.0", "1.2", "2", 1]) | _text_or_junk,
        "server_count": _text_or_junk,
        "status": st.sampled_from(["completed", "initializing"]) | _text_or_junk,
        "server_list": st.lists(_server | _text_or_junk, max_size=4) | _text_or_junk,
        "super_pod_list": st.lists(_pod | _text_or_junk, max_size=3) | _text_or_junk,
    },
)


@settings(max_examples=examples(600), deadline=None)
@given(_table, st.sampled_from(["910", "910b"]))
def test_validate_never_raises_on_rank_table_like_values(table: Dict[str, Any], chip: str) -> None:
    result = validate_rank_table(table, chip=chip)
    assert all(isinstance(v, Violation) and v.json_path and v.message for v in result)
    # Whatever is found also survives rendering (to JSON text that reads back as the table) and the
    # default name (used by the CLI).
    text = rank_table_json(table)
    assert text.endswith("}\n")
    assert json.loads(text) == table
    default_table_name(table)


@settings(max_examples=examples(300), deadline=None)
@given(st.text())
def test_parse_json_never_raises_anything_else(text: str) -> None:
    try:
        value = parse_rank_table_json(text, "t.json")
    except MsLaunchError:
        return
    validate_rank_table(value)


# --------------------------------------------------------------------------------------------
# JSON in and out


@pytest.mark.parametrize(
    "text, where, message",
    [
        (
            '{"version": "1.0",\n  "status": "completed"\n  "x": 1}',
            "t.json:3:3",
            "invalid JSON: Expecting ',' delimiter",
        ),
        ("", "t.json:1:1", "invalid JSON: Expecting value"),
        ('{"a" 1}', "t.json:1:6", "invalid JSON: Expecting ':' delimiter"),
    ],
)
def test_parse_json_errors(text: str, where: str, message: str) -> None:
    with pytest.raises(RankTableJSONError) as info:
        parse_rank_table_json(text, "t.json")
    assert info.value.where() == where
    assert str(info.value) == f"{where}: {message}"
    assert isinstance(info.value, RankTableError)


def test_parse_json_other_errors() -> None:
    with pytest.raises(RankTableError) as info:
        parse_rank_table_json('{"server_list": [{"device": [{"rank_id": "0", "rank_id": "1"}]}]}', "t.json")
    assert str(info.value) == "t.json: key 'rank_id' appears twice in one object; keep one"
    with pytest.raises(RankTableError) as info:
        parse_rank_table_json("[" * 100000 + "]" * 100000, "t.json")
    assert str(info.value) == "t.json: invalid rank table: JSON nested deeper than 64 levels"
    with pytest.raises(RankTableError):
        parse_rank_table_json("1" * 5000, "t.json")  # beyond int's digit limit (3.11+) or fine (3.9)


def test_read_rank_table_errors(tmp_path) -> None:
    with pytest.raises(RankTableError) as info:
        read_rank_table(str(tmp_path / "no.json"))
    assert str(info.value) == f"{tmp_path / 'no.json'}: no such rank table file"
    with pytest.raises(RankTableError) as info:
        read_rank_table(str(tmp_path))
    assert str(info.value) == f"{tmp_path}: is a directory, not a rank table file"


def test_parse_json_large_int_is_ok_or_error() -> None:
    try:
        value = parse_rank_table_json("1" * 5000)
    except RankTableError:
        return
    assert validate_rank_table(value)[0].json_path == "$"


def test_rank_table_json_key_order() -> None:
    shuffled = {
        "status": "completed",
        "extra": {"b": 1},
        "server_list": [
            {
                "host_nic_ip": "reserve",
                "device": [{"rank_id": "0", "x": "y", "device_ip": "1.1.1.1", "device_id": "0"}],
                "server_id": "s",
            }
        ],
        "server_count": "1",
        "version": "1.0",
    }
    assert rank_table_json(shuffled) == (
        "{\n"
        '  "version": "1.0",\n'
        '  "server_count": "1",\n'
        '  "server_list": [\n'
        "    {\n"
        '      "server_id": "s",\n'
        '      "device": [\n'
        "        {\n"
        '          "device_id": "0",\n'
        '          "device_ip": "1.1.1.1",\n'
        '          "rank_id": "0",\n'
        '          "x": "y"\n'
        "        }\n"
        "      ],\n"
        '      "host_nic_ip": "reserve"\n'
        "    }\n"
        "  ],\n"
        '  "status": "completed",\n'
        '  "extra": {\n'
        '    "b": 1\n'
        "  }\n"
        "}\n"
    )
    assert list(shuffled) == ["status", "extra", "server_list", "server_count", "version"]  # input untouched


@pytest.mark.parametrize(
    "table, name",
    [
        (one_server([0, 1, 2, 3]), "hccl_4p_0123_10.0.0.1.json"),
        (one_server([4, 5, 6, 7], sid="host/with space"), "hccl_4p_4567_host_with_space.json"),
        (seed(16), "rank_table_16pcs.json"),
        (A3_TABLE, "rank_table_6pcs.json"),
    ],
)
def test_default_table_name(table: Dict[str, Any], name: str) -> None:
    assert default_table_name(table) == name


def test_resolve_default_exists_lists_the_folder_once(tmp_path) -> None:
    (tmp_path / "a").write_text("address_0=1.1.1.1\n")
    (tmp_path / "b.conf").write_text("address_0=1.1.1.2\n")
    inv = Inventory((host("a", slots=1), host("b", slots=1)))
    assert resolve_device_ips(inv, hccn_dir=str(tmp_path)) == {"a": {0: "1.1.1.1"}, "b": {0: "1.1.1.2"}}
    with pytest.raises(RankTableError) as info:
        resolve_device_ips(inv, hccn_dir=str(tmp_path / "nope"))
    assert str(info.value) == f"--hccn-dir: no such folder {tmp_path / 'nope'}"
    # A folder that is never needed is never listed.
    assert resolve_device_ips(
        inv, hccn_dir=str(tmp_path / "nope"), hccn_files={"a": str(tmp_path / "a"), "b": str(tmp_path / "a")}
    ) == {"a": {0: "1.1.1.1"}, "b": {0: "1.1.1.1"}}


def test_rank_table_host_order() -> None:
    from launcher.planning.ranktable import rank_table_host_order

    inv = a3_inventory()
    assert [h.name for h in rank_table_host_order(inv.hosts, "1.2")] == ["n2a", "n2b", "n10"]
    assert [h.name for h in rank_table_host_order(inv.hosts, "1.0")] == ["n10", "n2a", "n2b"]


_device_edits = st.lists(
    st.tuples(
        st.integers(0, 2),  # server (taken modulo the table's)
        st.integers(0, 7),  # device (likewise)
        st.sampled_from(["device_id", "device_ip", "rank_id", "super_device_id", "device_port", "host_port", "x"]),
        st.sampled_from(["copy", "delete", "set"]),  # copy: the next device's value of the key
        _text_or_junk | st.sampled_from(["192.1.1.1", "3", "16", "00"]),
    ),
    max_size=3,
)


@settings(max_examples=examples(400), deadline=None)
@given(st.sampled_from(["seed16", "a3"]), _device_edits, st.sampled_from(["910", "910b"]))
def test_validate_fast_device_check_agrees_with_the_full_one(base: str, edits: list, chip: str) -> None:
    """Valid tables with a few device fields changed (junk, missing keys, a value copied from the
    next device): the fast per-device check may only say "no problem" where the full check
    finds none."""
    from unittest import mock

    from launcher.planning.ranktable import validate as validate_mod

    table = seed(16) if base == "seed16" else copy.deepcopy(A3_TABLE)
    for s, d, key, action, value in edits:
        devices = table["server_list"][s % len(table["server_list"])]["device"]
        device = devices[d % len(devices)]
        if action == "delete":
            device.pop(key, None)
        elif action == "copy":
            device[key] = devices[(d + 1) % len(devices)].get(key)
        else:
            device[key] = value
    fast = validate_rank_table(table, chip=chip)
    with mock.patch.object(validate_mod, "_device_ok", lambda *args: validate_mod._PROBLEM):
        full = validate_rank_table(table, chip=chip)
    assert fast == full
