"""Planning at scale: the linear paths give the same values as the simple definitions they replace.

No timing here (the machine is shared; ``bench/bench_plan_scale.py`` measures); these tests pin
down that the fast paths (per-host caches, one-pass grouping, the line scanner, orjson) change
no value, on inventories big enough to hit them.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from launcher.planning.inventory.hostarg import parse_host_list
from launcher.planning.inventory.hostfile import parse_hostfile
from launcher.planning.inventory.model import Inventory
from launcher.planning.job import envs, layout
from launcher.planning.job.ranks import RankSlot, assign_ranks, new_frozen, used_inventory
from launcher.planning.text.jsontext import dumps_indented
from tests.harness.hypo import examples


def naive_used_inventory(inventory: Inventory, slots: Any) -> Inventory:
    """The definition: every host, restricted to the devices its slots use."""
    used = []
    for host in inventory.hosts:
        devices = tuple(s.device_id for s in slots if s.host == host.name)
        if devices:
            used.append(replace(host, slots=len(devices), devices=devices, max_slots=None))
    return Inventory(tuple(used), source=inventory.source)


@settings(max_examples=examples(60), deadline=None)
@given(st.lists(st.integers(1, 8), min_size=1, max_size=40), st.data())
def test_used_inventory_matches_its_definition(slots_per_host: Any, data: Any) -> None:
    inv = parse_host_list(",".join(f"h{i}:{n}" for i, n in enumerate(slots_per_host)))
    total = sum(slots_per_host)
    np = data.draw(st.integers(1, total))
    per_host = data.draw(st.one_of(st.none(), st.integers(1, 8)))
    if per_host is not None and sum(min(n, per_host) for n in slots_per_host) < np:
        per_host = None
    slots = assign_ranks(inv, np=np, per_host=per_host)
    assert used_inventory(inv, slots) == naive_used_inventory(inv, slots)


def test_new_frozen_is_the_dataclass_value() -> None:
    fields = dict(rank=5, local_rank=1, node_rank=2, host="h", device_id=3, world_size=8, local_world_size=4)
    fast, slow = new_frozen(RankSlot, **fields), RankSlot(**fields)
    assert (fast, hash(fast), repr(fast)) == (slow, hash(slow), repr(slow))
    assert replace(fast, rank=6) == RankSlot(**dict(fields, rank=6))


def test_dynamic_worker_layout_matches_the_one_rank_env() -> None:
    slots = assign_ranks(parse_host_list("a:4,b:4"))
    make = envs.dynamic_worker_layout(8, "a", 8118, 30)
    for slot in slots:
        env = make(slot)
        assert env == envs.dynamic_scheduler_env(8, "a", 8118, 30) | {
            "MS_ROLE": "MS_WORKER",
            "MS_NODE_ID": str(slot.rank),
            "RANK_ID": str(slot.rank),
            "RANK_SIZE": "8",
            "DEVICE_ID": str(slot.device_id),
            "LOCAL_RANK": str(slot.local_rank),
            "LOCAL_WORLD_SIZE": "4",
        }
        assert list(env) == [
            "MS_ROLE",
            "MS_WORKER_NUM",
            "MS_SCHED_HOST",
            "MS_SCHED_PORT",
            "MS_TOPO_TIMEOUT",
            "MS_NODE_ID",
            "RANK_ID",
            "RANK_SIZE",
            "DEVICE_ID",
            "LOCAL_RANK",
            "LOCAL_WORLD_SIZE",
        ]
        assert env == envs.dynamic_worker_env(slot, "a", 8118, 30)


def test_worker_log_filler_matches_worker_log() -> None:
    for folder, prefix in [("/j", None), ("/j/{rank}x", "w_{rank}"), ("/a b", "log")]:
        fill = layout.worker_log_filler(folder, prefix)
        for i in (0, 7, 12345):
            assert fill(i) == layout.worker_log(folder, i, prefix)


def test_big_hostfile_line_numbers_and_comments() -> None:
    """10,000 hosts among comments and blank lines: every host with its own line number."""
    rows = []
    for i in range(10000):
        rows += [f"# rack {i}", "", f"  node{i:05d} slots=8 # eight", "\t"]
    inv = parse_hostfile("\n".join(rows) + "\n# end", "h.txt")
    assert len(inv.hosts) == 10000
    assert [h.source for h in inv.hosts[:2]] == ["h.txt:3", "h.txt:7"]
    assert inv.hosts[-1].source == f"h.txt:{4 * 9999 + 3}" and inv.hosts[-1].name == "node09999"
    assert {h.slots for h in inv.hosts} == {8}


@pytest.mark.heavy
def test_10k_hosts_by_8_assigns_80000_ranks_in_order() -> None:
    inv = parse_hostfile("".join(f"node{i:05d} slots=8\n" for i in range(10000)), "h.txt")
    slots = assign_ranks(inv)
    assert len(slots) == 80000
    last = slots[-1]
    assert (last.rank, last.host, last.local_rank, last.node_rank, last.device_id) == (79999, "node09999", 7, 9999, 7)
    used = used_inventory(inv, slots)
    assert len(used.hosts) == 10000 and used.hosts[1].devices == tuple(range(8))


json_plain = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=25,
)


@settings(max_examples=examples(400), deadline=None)
@given(json_plain)
def test_dumps_indented_is_json_dumps(value: Any) -> None:
    """Byte for byte, including non-ASCII, surrogates and integers beyond 64 bits (fallbacks)."""
    assert dumps_indented(value) == json.dumps(value, indent=2)


def test_dumps_indented_escapes_what_json_dumps_escapes() -> None:
    """Every character json.dumps escapes, alone, in a key and among other text (orjson writes
    DEL, U+007F, as it is: ASCII, but json.dumps escapes it)."""
    for code in [*range(0x20), 0x22, 0x5C, 0x7F, 0x80, 0xE9, 0x2028, 0xFFFF, 0x1F600]:
        char = chr(code)
        for value in (char, {char: [f"a{char}b"]}):
            assert dumps_indented(value) == json.dumps(value, indent=2), hex(code)


@settings(max_examples=examples(200), deadline=None)
@given(
    st.recursive(
        st.floats(allow_nan=False, allow_infinity=False) | st.integers(-5, 5),
        lambda inner: st.lists(inner, max_size=4),
        max_leaves=10,
    )
)
def test_dumps_indented_floats_keep_their_value(value: Any) -> None:
    assert json.loads(dumps_indented(value)) == value


# --------------------------------------------------------------------------------------------
# build_plan's per-host caches give each rank the env, argv and log of the one-rank definitions


@settings(max_examples=examples(40), deadline=None)
@given(
    hosts=st.lists(st.integers(1, 4), min_size=1, max_size=6),
    user_env=st.lists(
        st.sampled_from(["LOCAL_RANK", "LOCAL_WORLD_SIZE", "MS_TOPO_TIMEOUT", "FOO", "PYTHONUNBUFFERED"]),
        unique=True,
        max_size=3,
    ),
    host_env=st.booleans(),
    timeout=st.one_of(st.none(), st.integers(1, 900)),
)
def test_cached_rank_envs_match_the_definition(hosts: Any, user_env: Any, host_env: bool, timeout: Any) -> None:
    from launcher.planning.build import build_plan, program_argv
    from launcher.planning.job.procenv import ProcEnv
    from launcher.planning.job.spec import JobSpec

    inv = parse_host_list(",".join(f"h{i}:{n}" for i, n in enumerate(hosts)))
    if host_env:  # one host with its own env, overlapping the layout's keys or not
        inv = Inventory((replace(inv.hosts[0], env=(("LOCAL_RANK", "x"), ("BAR", "1"))),) + inv.hosts[1:])
    spec = JobSpec(
        inventory=inv,
        program=("train.py",),
        python="/usr/bin/python3",
        cwd="/w",
        job_dir="/w/j",
        job_id="j",
        env=tuple((k, "user") for k in user_env),
        cluster_time_out=timeout,
    )
    plan = build_plan(spec)
    slots = assign_ranks(inv)
    used = list(used_inventory(inv, slots).hosts)
    proc_env = ProcEnv.build(spec, plan.launcher, slots, used)
    by_name = {h.name: h for h in used}
    for slot, proc in zip(slots, plan.ranks):
        host = by_name[slot.host]
        want = envs.layered(
            proc_env.user_env(host, slot.rank), envs.dynamic_worker_env(slot, plan.master_addr, 8118, timeout)
        )
        assert proc.env == want
        assert proc.argv == program_argv(spec, host)
        assert proc.log == layout.worker_log("/w/j", slot.rank)


def test_the_rank_cache_works_out_each_hosts_shared_prefix_once_whether_it_has_one_or_not(monkeypatch: Any) -> None:
    """A host whose env sets one of the layout's keys has no shared prefix: the cache remembers
    that answer (None) as it remembers a prefix, and never asks again; ranks bound to cores
    here (this machine's) never use one."""
    from launcher.planning import build as planmod
    from launcher.planning.build import build_plan
    from launcher.planning.job.procenv import ProcEnv
    from launcher.planning.job.spec import JobSpec

    asked = []
    original = planmod._RankCache.shared_prefix

    def spy(self: Any, host: Any, slot: Any, sched_addr: str) -> Any:
        found = original(self, host, slot, sched_addr)
        asked.append((host.name, found is None))
        return found

    monkeypatch.setattr(planmod._RankCache, "shared_prefix", spy)
    inv = parse_host_list("localhost:2,h1:3,h2:3")
    inv = Inventory((inv.hosts[0], replace(inv.hosts[1], env=(("LOCAL_RANK", "x"),)), inv.hosts[2]))
    spec = JobSpec(
        inventory=inv, program=("train.py",), python="/usr/bin/python3", cwd="/w", job_dir="/w/j", job_id="j"
    )
    plan = build_plan(spec)
    assert asked == [("h1", True), ("h2", False)]

    slots = assign_ranks(inv)
    proc_env = ProcEnv.build(spec, plan.launcher, slots, list(inv.hosts))
    assert set(proc_env.local_index) == {0, 1}
    by_name = {h.name: h for h in inv.hosts}
    for slot, proc in zip(slots, plan.ranks):
        want = envs.layered(
            proc_env.user_env(by_name[slot.host], slot.rank), envs.dynamic_worker_env(slot, plan.master_addr, 8118)
        )
        assert proc.env == want
    keys = [k for k, _ in plan.ranks[2].env]  # h1's first rank: the layout's value, in the user's place
    assert dict(plan.ranks[2].env)["LOCAL_RANK"] == "0" and keys.index("LOCAL_RANK") < keys.index("MS_ROLE")
    assert len(keys) == len(set(keys))


# --------------------------------------------------------------------------------------------
# Guards of the scale promise (docs/benchmarks.md: plan of 10k hosts x 8 in <= 2 s): the work of
# planning, counted in Python steps (tests/harness/growth.py), grows linearly with the hosts.
# A per-host scan of every rank (e.g. ``any(s.host == h.name for s in slots)`` for each host)
# grows it about 11x for 4x the hosts; linear is 4x.


def _plan_of(inventory_text: Any, parse: Any, **spec_args: Any) -> Any:
    from launcher.planning.build import build_plan
    from launcher.planning.job.spec import JobSpec

    def make(hosts: int) -> Any:
        spec = JobSpec(
            inventory=parse(inventory_text(hosts)),
            program=("train.py",),
            python="/usr/bin/python3",
            cwd="/w",
            job_dir="/w/j",
            job_id="j",
            **spec_args,
        )
        return lambda: build_plan(spec)

    return make


def test_planning_work_grows_linearly_with_the_hosts_of_a_hostfile() -> None:
    from tests.harness.growth import assert_linear

    assert_linear(
        _plan_of(lambda n: "".join(f"node{i:05d} slots=8\n" for i in range(n)), lambda t: parse_hostfile(t, "h.txt")),
        100,
    )


def test_planning_work_grows_linearly_with_the_hosts_of_a_cluster_yaml() -> None:
    """The issue's case: a YAML cluster file, ssh launcher (remote hosts' threads planned at start)."""
    from launcher.planning.inventory.clusteryaml import parse_cluster_yaml
    from tests.harness.growth import assert_linear

    text = lambda n: "defaults:\n  slots: 8\nhosts:\n" + "".join(f"  - host: node{i:05d}\n" for i in range(n))  # noqa: E731
    assert_linear(_plan_of(text, lambda t: parse_cluster_yaml(t, "c.yaml")), 100)


def test_plan_json_rendering_work_grows_linearly() -> None:
    """``plan --json`` / plan.json: the plan's dict and its text, every rank in full."""
    from launcher.execution.backend import plan_json
    from tests.harness.growth import assert_linear

    build = _plan_of(
        lambda n: "".join(f"node{i:05d} slots=8\n" for i in range(n)), lambda t: parse_hostfile(t, "h.txt")
    )

    def make(hosts: int) -> Any:
        plan = build(hosts)()
        return lambda: dumps_indented(plan_json(plan))

    assert_linear(make, 50)


def test_mpirun_command_work_grows_linearly_with_the_hosts() -> None:
    """``--launcher mpirun``: one app context per host (a scan of every rank for each host made
    4,000 hosts x 8 plan in 29 s where 1,000 took 1.3 s)."""
    from launcher.planning.backends.mpirun import mpirun_plan_launch
    from tests.harness.growth import assert_linear

    build = _plan_of(
        lambda n: "".join(f"node{i:05d} slots=8\n" for i in range(n)),
        lambda t: parse_hostfile(t, "h.txt"),
        launcher="mpirun",
        wrapper="/opt/w.sh",
    )

    def make(hosts: int) -> Any:
        plan = build(hosts)()
        return lambda: mpirun_plan_launch(plan)

    assert_linear(make, 50)
