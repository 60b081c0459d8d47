"""Rank tables at 4,096 servers: the fast paths (depth-only check, orjson text) keep every answer."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from launcher.errors import RankTableError
from launcher.planning.ranktable import MAX_JSON_DEPTH, parse_rank_table_json, rank_table_json, validate_rank_table
from launcher.planning.ranktable.parse import (
    MAX_RANK_TABLE_BYTES,
    MAX_TABLE_DEVICES,
    _check_json_depth,
    _check_json_value,
)
from tests.harness.hypo import examples


def big_table(servers: int, devices: int = 8, v12: bool = False) -> Any:
    rows = []
    for i in range(servers):
        server: Any = {"server_id": f"10.{i // 256}.{i % 256}.1"}
        if v12:
            server["host_ip"] = f"172.{i // 256}.{i % 256}.1"
        server["device"] = []
        for d in range(devices):
            dev = {"device_id": str(d), "device_ip": f"192.{d}.{i // 256}.{i % 256}"}
            if v12:
                dev["super_device_id"] = str(i * devices + d)
            dev["rank_id"] = str(i * devices + d)
            server["device"].append(dev)
        server["host_nic_ip"] = "reserve"
        rows.append(server)
    rows.sort(key=lambda s: s["server_id"])
    for n, dev in enumerate(d for s in rows for d in s["device"]):
        dev["rank_id"] = str(n)
        if v12:
            dev["super_device_id"] = str(n)
    table: Any = {
        "version": "1.2" if v12 else "1.0",
        "server_count": str(servers),
        "server_list": rows,
        "status": "completed",
    }
    if v12:
        table["super_pod_list"] = [{"super_pod_id": "0", "server_list": [{"server_id": s["server_id"]} for s in rows]}]
    return table


@pytest.mark.heavy
@pytest.mark.parametrize("v12, devices", [(False, 8), (True, 8), (True, 16)])
def test_4096_server_table_fits_the_caps_and_validates(v12: bool, devices: int) -> None:
    table = big_table(4096, devices, v12)
    text = rank_table_json(table)
    assert len(text.encode()) <= MAX_RANK_TABLE_BYTES and 4096 * devices <= MAX_TABLE_DEVICES
    parsed = parse_rank_table_json(text, "t.json")
    assert parsed == table
    assert validate_rank_table(parsed) == []


@pytest.mark.parametrize("escape", ["", '"\\\\u0000 is text"', '"\\ud800"'])
def test_depth_limit_with_and_without_the_string_walk(escape: str) -> None:
    """64 levels parse, 65 are refused, whichever check runs (an escape selects the full walk)."""
    inner = escape or "1"
    ok = "[" * MAX_JSON_DEPTH + inner + "]" * MAX_JSON_DEPTH
    deep = "[" * (MAX_JSON_DEPTH + 1) + inner + "]" * (MAX_JSON_DEPTH + 1)
    if escape == '"\\ud800"':
        with pytest.raises(RankTableError, match="lone surrogate"):
            parse_rank_table_json(ok, "t.json")
    else:
        assert parse_rank_table_json(ok, "t.json") is not None
    with pytest.raises(RankTableError) as info:
        parse_rank_table_json(deep, "t.json")
    assert str(info.value) == f"t.json: invalid rank table: JSON nested deeper than {MAX_JSON_DEPTH} levels"


def test_nul_in_text_is_still_found() -> None:
    with pytest.raises(RankTableError, match="NUL"):
        parse_rank_table_json('{"server_list": [{"server_id": "a\\u0000"}]}', "t.json")


nested = st.recursive(
    st.integers(0, 3) | st.text(max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner, max_size=3),
    max_leaves=80,
)


@settings(max_examples=examples(300), deadline=None)
@given(nested, st.integers(1, 6))
def test_depth_only_check_agrees_with_the_full_walk(value: Any, wrap: int) -> None:
    for _ in range(wrap * 12):  # push some values past the limit
        value = [value]
    value = json.loads(json.dumps(value).replace("\\u0000", "").replace("\\ud", "ud"))

    def outcome(check: Any) -> str:
        try:
            check(value, "t.json")
        except RankTableError as exc:
            return str(exc)
        return "ok"

    full = outcome(_check_json_value)
    if "NUL" not in full and "surrogate" not in full:
        assert outcome(_check_json_depth) == full


# --------------------------------------------------------------------------------------------
# Guards of the rank-table scale promise (docs/benchmarks.md: gen / validate / show of 4,096
# servers x 8 in <= 2 s): the work, counted in Python steps (tests/harness/growth.py, no clock),
# grows linearly with the servers; a per-server scan of the servers grows it about 16x for 4x.


def test_rank_table_build_work_grows_linearly() -> None:
    from launcher.planning.inventory.clusteryaml import parse_cluster_yaml
    from launcher.planning.ranktable import build_rank_table
    from tests.harness.growth import assert_linear

    def make(n: int) -> Any:
        text = "defaults:\n  slots: 8\nhosts:\n" + "".join(
            f"  - host: node{i:04d}\n    host_ip: 192.168.{i // 256}.{i % 256}\n    super_pod_id: '{i // 16}'\n"
            f"    super_device_ids: {{{', '.join(f'{d}: {chr(39)}{i * 8 + d}{chr(39)}' for d in range(8))}}}\n"
            for i in range(n)
        )
        inv = parse_cluster_yaml(text, "c.yaml")
        ips = {h.name: {d: f"10.{d}.{i // 256}.{i % 256}" for d in range(8)} for i, h in enumerate(inv.hosts)}
        return lambda: (build_rank_table(inv, ips, "1.0"), build_rank_table(inv, ips, "1.2"))

    assert_linear(make, 32)


def test_rank_table_validate_and_text_work_grows_linearly() -> None:
    from tests.harness.growth import assert_linear

    def make(n: int) -> Any:
        tables = [big_table(n), big_table(n, v12=True)]
        return lambda: [validate_rank_table(parse_rank_table_json(rank_table_json(t), "t.json")) for t in tables]

    assert_linear(make, 32)


def test_rank_table_merge_work_grows_linearly() -> None:
    """Merging one table per server (what merge_hccl.py is for)."""
    from launcher.planning.ranktable import merge_rank_tables
    from tests.harness.growth import assert_linear

    def one(i: int) -> Any:
        table = big_table(1)
        table["server_list"][0]["server_id"] = f"10.{i // 256}.{i % 256}.1"
        for d, dev in enumerate(table["server_list"][0]["device"]):
            dev["device_ip"] = f"192.{d}.{i // 256}.{i % 256}"
        return table

    def make(n: int) -> Any:
        tables = [(f"t{i}.json", one(i)) for i in range(n)]
        return lambda: merge_rank_tables(tables)

    assert_linear(make, 32)
