"""Guards of the inventory side of the scale promises (docs/benchmarks.md: 10,000-host hostfiles
and YAML cluster files, Slurm hostlists): the parsers' work, counted in Python steps
(tests/harness/growth.py, no clock), grows linearly with the hosts; a per-host scan of the hosts
before it (a duplicate check against a list, say) grows it about 16x for 4x the hosts."""

from __future__ import annotations

from typing import Any

from launcher.planning.inventory.clusteryaml import parse_cluster_yaml
from launcher.planning.inventory.hostarg import parse_host_list
from launcher.planning.inventory.hostfile import parse_hostfile
from launcher.planning.inventory.hostlist import expand_hostlist, fold_hostlist
from tests.harness.growth import assert_linear


def test_hostfile_parsing_work_grows_linearly() -> None:
    def make(n: int) -> Any:
        text = "".join(f"# rack {i}\nnode{i:05d} slots=8 max_slots=8\n" for i in range(n))
        return lambda: parse_hostfile(text, "h.txt")

    assert_linear(make, 200)


def test_cluster_yaml_parsing_work_grows_linearly() -> None:
    def make(n: int) -> Any:
        text = "defaults:\n  slots: 8\nhosts:\n" + "".join(
            f"  - host: node{i:05d}\n    env: {{A: '{i}'}}\n    device_ips: {{0: 10.0.{i // 256}.{i % 256}}}\n"
            for i in range(n)
        )
        return lambda: parse_cluster_yaml(text, "c.yaml")

    assert_linear(make, 100)


def test_host_list_parsing_work_grows_linearly() -> None:
    def make(n: int) -> Any:
        text = ",".join(f"node{i:05d}:8" for i in range(n))
        return lambda: parse_host_list(text)

    assert_linear(make, 200)


def test_hostlist_expansion_and_folding_work_grows_linearly() -> None:
    def make(n: int) -> Any:
        ranges = f"node[{0:05d}-{n - 1:05d}]"
        elements = ",".join(f"gpu{i}" for i in range(n))
        return lambda: (
            expand_hostlist(ranges, limit=10**6),
            expand_hostlist(elements, limit=10**6),
            fold_hostlist(f"node{i:05d}" for i in range(n)),
        )

    assert_linear(make, 200)
