"""The rank-table examples in hostfiles/ generate valid tables."""

from __future__ import annotations

import glob
import json
import os

import pytest

from launcher.planning.inventory.sources import read_inventory
from launcher.planning.ranktable import build_rank_table, rank_table_json, resolve_device_ips, validate_rank_table
from launcher.planning.ranktable.hccn import read_hccn_conf

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOSTFILES = os.path.join(ROOT, "hostfiles")
DATA = os.path.join(ROOT, "tests", "data")


def test_ascend_2x8_is_seed_001s_16_device_table() -> None:
    inv = read_inventory(os.path.join(HOSTFILES, "ascend_2x8.yaml"))
    assert [h.hccn_conf for h in inv.hosts] == [
        os.path.join(HOSTFILES, "hccn", "10.0.0.1.conf"),
        os.path.join(HOSTFILES, "hccn", "10.0.0.2.conf"),
    ]
    table = build_rank_table(inv, resolve_device_ips(inv))
    assert validate_rank_table(table, chip="910") == []
    with open(os.path.join(DATA, "seed001_rank_table_16pcs.json"), encoding="utf-8") as fh:
        assert table == json.load(fh)
    with open(os.path.join(DATA, "golden", "rank_table_16pcs.json"), encoding="utf-8") as fh:
        assert rank_table_json(table) == fh.read()


def test_a3_superpod_v12() -> None:
    inv = read_inventory(os.path.join(HOSTFILES, "a3_superpod.yaml"))
    table = build_rank_table(inv, resolve_device_ips(inv), version="1.2")
    assert validate_rank_table(table, chip="910") == []
    assert [(s["server_id"], s["host_ip"]) for s in table["server_list"]] == [
        ("node0", "172.16.0.100"),
        ("node1", "172.16.0.101"),
        ("node2", "172.16.1.100"),
        ("node3", "172.16.1.101"),
    ]
    assert table["server_list"][3]["device"][3] == {
        "device_id": "3",
        "super_device_id": "7",
        "device_ip": "192.168.2.13",
        "rank_id": "15",
    }
    assert table["super_pod_list"] == [
        {"super_pod_id": "0", "server_list": [{"server_id": "node0"}, {"server_id": "node1"}]},
        {"super_pod_id": "1", "server_list": [{"server_id": "node2"}, {"server_id": "node3"}]},
    ]


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(HOSTFILES, "hccn", "*.conf"))))
def test_hccn_examples_parse(path: str) -> None:
    # hostfiles/hccn/ holds hccn.conf copies (not inventories): every one has devices 0-7.
    assert sorted(read_hccn_conf(path)) == list(range(8))
