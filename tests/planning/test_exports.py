"""The split modules keep their old import paths: ``planning.inventory`` and ``planning.ranktable``
re-export what other modules and tests import, as the same objects."""

from __future__ import annotations

import importlib

import pytest

from launcher.planning import ranktable
from launcher.planning.inventory import clusteryaml, yamltree
from launcher.planning.inventory import filters as hostfilter
from launcher.planning.inventory import hostarg as hostfile
from launcher.planning.inventory import model as hosts
from launcher.planning.inventory import sources as inventory
from launcher.planning.ranktable import build, devices, merge, parse, render, validate


@pytest.mark.parametrize("module", ["launcher.planning.inventory.sources", "launcher.planning.ranktable"])
def test_every_exported_name_resolves(module):
    mod = importlib.import_module(module)
    missing = [name for name in mod.__all__ if not hasattr(mod, name)]
    assert missing == []


@pytest.mark.parametrize(
    "name, home",
    [
        ("Host", hosts),
        ("Inventory", hosts),
        ("SshOptions", hosts),
        ("LOCAL_NAMES", hosts),
        ("is_local", hosts),
        ("env_problem", hosts),
        ("MAX_HOSTS", hosts),
        ("MAX_SLOTS", hosts),
        ("MAX_DEVICE_ID", hosts),
        ("MAX_ENV_ENTRY_BYTES", hosts),
        ("parse_hostfile", hostfile),
        ("parse_host_list", hostfile),
        ("parse_cluster_yaml", clusteryaml),
        ("apply_filters", hostfilter),
        ("parse_filter", hostfilter),
        ("MAX_YAML_CHARS", yamltree),
        ("MAX_YAML_DEPTH", yamltree),
        ("MAX_YAML_NODES", yamltree),
    ],
)
def test_inventory_reexports_the_same_objects(name, home):
    assert getattr(inventory, name) is getattr(home, name)


@pytest.mark.parametrize(
    "name, home",
    [
        ("resolve_device_ips", devices),
        ("build_rank_table", build),
        ("check_rank_table", build),
        ("rank_table_host_order", build),
        ("merge_rank_tables", merge),
        ("validate_rank_table", validate),
        ("parse_rank_table_json", parse),
        ("read_rank_table", parse),
        ("rank_table_json", render),
        ("default_table_name", render),
        ("table_size", render),
    ],
)
def test_ranktable_reexports_the_same_objects(name, home):
    assert getattr(ranktable, name) is getattr(home, name)


@pytest.mark.parametrize(
    "name, local",
    [
        ("localhost", True),
        ("127.0.0.1", True),
        ("::1", True),
        ("localhost.localdomain", True),
        ("10.0.0.1", False),
        ("node1", False),
        ("127.0.0.2", False),
        ("", False),
    ],
)
def test_one_answer_to_is_this_host_local(name, local):
    assert inventory.is_local(name) is local
    assert inventory.Host(name=name or "x", slots=1).is_local is (local if name else False)
