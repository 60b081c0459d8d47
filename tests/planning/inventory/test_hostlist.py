"""Slurm hostlists: expansion in written order, folding, agreement with ``scontrol show hostnames``,
and hostlists in ``-H`` / ``--hosts``."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from typing import Any, List

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launcher.errors import InventoryError
from launcher.planning.inventory.hostarg import parse_host_list
from launcher.planning.inventory.hostlist import expand_hostlist, fold_hostlist, is_hostlist_name
from launcher.planning.inventory.model import MAX_HOSTS
from launcher.planning.inventory.sources import read_hosts_arg
from tests.harness.hypo import examples

LIMIT = 100_000

PREFIX_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_.-"


def random_range(rnd: Any) -> str:
    """``N`` or ``LO-HI`` with LO <= HI, each end written with or without zero padding of its own
    (Slurm pads to LO's width as written, whatever HI's; HI may run past that width)."""
    width = rnd.randint(1, 4)
    lo = rnd.randint(0, 10**width - 1)
    hi = rnd.randint(lo, lo + 12)
    lo_text = str(lo).zfill(width) if rnd.random() < 0.5 else str(lo)
    if lo == hi and rnd.random() < 0.5:
        return lo_text
    hi_text = str(hi).zfill(rnd.randint(1, 5)) if rnd.random() < 0.5 else str(hi)
    return f"{lo_text}-{hi_text}"


def random_hostlist(rnd: Any) -> str:
    """1-4 elements: ``pre[ranges]``, ``pre[ranges]mid[ranges]`` (Slurm 22.05 wants a bracket
    last) or a plain name; prefixes start with a letter and do not end with a digit."""
    elements = []
    for _ in range(rnd.randint(1, 4)):
        pre = rnd.choice("abcdefghijklmnopqrstuvwxyz") + "".join(
            rnd.choice(PREFIX_CHARS) for _ in range(rnd.randint(0, 5))
        )
        pre = pre.rstrip("0123456789") or "n"
        if rnd.random() < 0.15:
            elements.append(pre + str(rnd.randint(0, 99)))
            continue
        text = pre
        for i in range(rnd.randint(1, 2)):
            if i:
                text += rnd.choice(["-", "x", "-ib"])
            text += "[" + ",".join(random_range(rnd) for _ in range(rnd.randint(1, 3))) + "]"
        elements.append(text)
    return ",".join(elements)


def scontrol_env(tmp_path: Any) -> Any:
    conf = tmp_path / "slurm.conf"
    conf.write_text(
        "ClusterName=t\nSlurmctldHost=localhost\nNodeName=n1 CPUs=1 State=UNKNOWN\n"
        "PartitionName=p Nodes=ALL Default=YES State=UP\n"
    )
    return dict(os.environ, SLURM_CONF=str(conf))


@pytest.mark.e2e
@pytest.mark.skipif(shutil.which("scontrol") is None, reason="scontrol (slurm-client) is not installed")
@settings(max_examples=examples(4), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.integers(0, 2**32))
def test_expansion_agrees_with_scontrol(tmp_path, seed: int) -> None:
    """100 generated hostlists per ``scontrol`` call (joined by commas: the expansion of a comma list
    is the expansions of its elements in order); 4 calls, 400 lists."""
    rnd = random.Random(seed)
    text = ",".join(random_hostlist(rnd) for _ in range(100))
    r = subprocess.run(
        ["scontrol", "show", "hostnames", text], capture_output=True, text=True, env=scontrol_env(tmp_path), timeout=60
    )
    assert r.returncode == 0, (r.stderr, text)
    assert expand_hostlist(text, limit=LIMIT) == r.stdout.split()


@settings(max_examples=examples(200), deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["node", "gpu-", "a.b", "rack1-n"]), st.integers(0, 300), st.sampled_from([1, 3])),
        min_size=1,
        max_size=60,
    )
)
def test_fold_expand_round_trips(parts: Any) -> None:
    names = sorted({f"{p}{str(n).zfill(w)}" for p, n, w in parts})
    folded = fold_hostlist(names)
    expanded = expand_hostlist(folded, limit=LIMIT)
    assert sorted(expanded) == names and len(expanded) == len(names)
    assert fold_hostlist(expanded) == folded


@pytest.mark.parametrize(
    "text, names",
    [
        ("node[01-04,07]", ["node01", "node02", "node03", "node04", "node07"]),
        ("n[3,1-2]", ["n3", "n1", "n2"]),
        ("b1,a[1-2]", ["b1", "a1", "a2"]),
        ("a[1-2]-ib[0-1]", ["a1-ib0", "a1-ib1", "a2-ib0", "a2-ib1"]),
        ("gpu-[1-2]a", ["gpu-1a", "gpu-2a"]),  # ClusterShell reads a suffix; Slurm 22.05 refuses it
        ("n[09-10]", ["n09", "n10"]),
        # zero padding is the low end's, as written (scontrol show hostnames, Slurm 22.05)
        ("n[01-2]", ["n01", "n02"]),
        ("n[1-02]", ["n1", "n2"]),
        ("n[0-01]", ["n0", "n1"]),
        ("n[005-12]", ["n005", "n006", "n007", "n008", "n009", "n010", "n011", "n012"]),
        ("n[98-101],m[099-100]", ["n98", "n99", "n100", "n101", "m099", "m100"]),
        ("m[05-100]", [f"m{i:02d}" for i in range(5, 101)]),
    ],
)
def test_expand_examples(text: str, names: List[str]) -> None:
    assert expand_hostlist(text, limit=LIMIT) == names


@pytest.mark.parametrize(
    "text, message",
    [
        ("n[3-1]", "hostlist 'n[3-1]': bad range '3-1' in 'n[3-1]' (invalid values in range)"),
        ("n[010-9]", "hostlist 'n[010-9]': bad range '010-9' in 'n[010-9]' (invalid values in range)"),
        ("n[a-b]", "hostlist 'n[a-b]': bad range 'a-b' in 'n[a-b]' (cannot convert string to integer)"),
        ("n[1-2", "missing ']' in hostlist 'n[1-2'"),
        ("n[1-100000000]", "hostlist 'n[1-100000000]' names more than 100000 hosts"),
        ("@group", "hostlist '@group' contains '@', which no Slurm hostlist has"),
        ("a,,b", "hostlist 'a,,b' has an empty element (check the commas)"),
    ],
)
def test_bad_hostlists(text: str, message: str) -> None:
    with pytest.raises(InventoryError) as info:
        expand_hostlist(text, limit=LIMIT)
    assert str(info.value) == message


def test_host_list_flag_takes_hostlists() -> None:
    inv = parse_host_list("node[1-3]:8,x[01-02,07],[::1]:2,[fe80::1]")
    assert [(h.name, h.slots) for h in inv.hosts] == [
        ("node1", 8),
        ("node2", 8),
        ("node3", 8),
        ("x01", 1),
        ("x02", 1),
        ("x07", 1),
        ("[::1]:2", 1),
        ("[fe80::1]", 1),
    ]
    assert inv.hosts[0].source == "-H entry 1" and inv.hosts[4].source == "-H entry 2"


@pytest.mark.parametrize(
    "text, message",
    [
        ("n[1-2],n2", "-H: duplicate host 'n2'; list each host once with its total slots"),
        (
            "n[2-1]:8",
            "-H: hostlist 1 'n[2-1]': bad range '2-1' in 'n[2-1]' (invalid values in range) (write h1:8,h2:8 or "
            "node[1-4]:8)",
        ),
        (
            "n[1-99999]",
            f"-H: hostlist 1 'n[1-99999]' names more than {MAX_HOSTS} hosts (write h1:8,h2:8 or node[1-4]:8)",
        ),
        ("a,n[1-2:8", "-H: missing ']' in hostlist 'a,n[1-2:8'"),
    ],
)
def test_host_list_flag_errors(text: str, message: str) -> None:
    with pytest.raises(InventoryError) as info:
        parse_host_list(text)
    assert str(info.value) == message


def test_hosts_arg_is_a_file_or_a_hostlist(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert [(h.name, h.slots) for h in read_hosts_arg("node[01-02]", default_slots=8).hosts] == [
        ("node01", 8),
        ("node02", 8),
    ]
    assert [(h.name, h.slots) for h in read_hosts_arg("solo").hosts] == [("solo", 1)]
    (tmp_path / "solo").write_text("other slots=4\n")
    assert [(h.name, h.slots) for h in read_hosts_arg("solo").hosts] == [("other", 4)]
    for missing in ("hosts.txt", "./node[1-2]", "my hosts"):
        with pytest.raises(InventoryError, match="no such file"):
            read_hosts_arg(missing)
    with pytest.raises(InventoryError) as info:
        read_hosts_arg("n[1-2],n1")
    assert str(info.value) == "--hosts: duplicate host 'n1'; list each host once with its total slots"


def test_is_hostlist_name() -> None:
    assert [
        is_hostlist_name(n) for n in ["node[1-4]", "n[01,03]x[1]", "[::1]", "[fe80::1]", "x[ab]", "plain", "n[]"]
    ] == [True, True, False, False, False, False, False]
