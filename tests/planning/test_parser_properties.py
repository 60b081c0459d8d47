"""Property tests: every planning parser maps any input to a result or one one-line MsLaunchError.

Three kinds of input per parser: arbitrary text (any Unicode, surrogates and control characters
included), text assembled from the tokens of its format (so the fuzzer reaches aliases, tags,
nesting and huge numbers instead of stopping at the first syntax error), and well-formed
documents of random structure.  No wall-clock limits here (the machine is shared); the worst
inputs' time and memory are measured in tests/planning/test_parser_bounds.py.
"""

from __future__ import annotations

import json
from typing import Any, Callable

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launcher.errors import MsLaunchError
from launcher.planning.inventory.clusteryaml import parse_cluster_yaml
from launcher.planning.inventory.filters import apply_filters
from launcher.planning.inventory.hostarg import parse_host_list
from launcher.planning.inventory.hostfile import parse_hostfile
from launcher.planning.inventory.model import Inventory
from launcher.planning.job.envs import parse_env_assignment, parse_env_file
from launcher.planning.job.ranks import assign_ranks
from launcher.planning.ranktable import (
    default_table_name,
    parse_rank_table_json,
    rank_table_json,
    table_size,
    validate_rank_table,
)
from launcher.planning.ranktable.hccn import parse_hccn_conf
from tests.harness.hypo import examples

SETTINGS = settings(
    max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)

#: Any text: every code point, lone surrogates and C0/C1 controls included.
ANY_TEXT = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=400)


def outcome(parse: Callable[[], Any]) -> Any:
    """Run ``parse``; an MsLaunchError must be one line naming something; anything else fails the test."""
    try:
        return parse()
    except MsLaunchError as exc:
        message = str(exc)
        assert message and "\n" not in message and "\r" not in message, repr(message)
        assert type(exc).__name__ != "MsLaunchError" or exc.where(), repr(message)  # the base class always says where
        return exc


def check_inventory(inv: Any) -> None:
    """A parsed inventory is usable: ranks can be assigned (or refused cleanly)."""
    if isinstance(inv, Inventory):
        assert inv.hosts
        outcome(lambda: assign_ranks(inv))


# --------------------------------------------------------------------------------------------
# arbitrary text


@SETTINGS
@given(ANY_TEXT)
def test_hostfile_any_text(text: str) -> None:
    check_inventory(outcome(lambda: parse_hostfile(text, "h.txt")))


@SETTINGS
@given(ANY_TEXT)
def test_host_list_any_text(text: str) -> None:
    check_inventory(outcome(lambda: parse_host_list(text)))


@SETTINGS
@given(ANY_TEXT)
def test_cluster_yaml_any_text(text: str) -> None:
    check_inventory(outcome(lambda: parse_cluster_yaml(text, "c.yaml")))


@SETTINGS
@given(ANY_TEXT)
def test_env_file_any_text(text: str) -> None:
    result = outcome(lambda: parse_env_file(text, "e.env"))
    if isinstance(result, tuple):
        for key, value in result:
            assert "\0" not in value and key.isidentifier()
            value.encode("utf-8")  # never a lone surrogate


@SETTINGS
@given(ANY_TEXT)
def test_env_flag_any_text(text: str) -> None:
    result = outcome(lambda: parse_env_assignment(text))
    if isinstance(result, tuple):
        assert "\0" not in result[1]
        result[1].encode("utf-8")


@SETTINGS
@given(ANY_TEXT, st.booleans())
def test_filters_any_text(text: str, include: bool) -> None:
    inv = parse_host_list("a:4,b:4")
    check_inventory(
        outcome(lambda: apply_filters(inv, include=text if include else None, exclude=None if include else text))
    )


@SETTINGS
@given(ANY_TEXT)
def test_hccn_any_text(text: str) -> None:
    outcome(lambda: parse_hccn_conf(text, "hccn.conf"))


def check_table_text(text: str) -> None:
    table = outcome(lambda: parse_rank_table_json(text, "t.json"))
    if isinstance(table, MsLaunchError):
        return
    for violation in validate_rank_table(table):
        assert "\n" not in str(violation)
    rank_table_json(table)
    table_size(table)
    if not validate_rank_table(table):
        default_table_name(table)


@SETTINGS
@given(ANY_TEXT)
def test_rank_table_any_text(text: str) -> None:
    check_table_text(text)


# --------------------------------------------------------------------------------------------
# text assembled from each format's tokens

YAML_TOKENS = [
    "hosts:",
    "defaults:",
    "- ",
    "  ",
    "    ",
    "\n",
    "host: ",
    "slots: ",
    "max_slots: ",
    "devices: ",
    "env: ",
    "ssh: ",
    "port: ",
    "device_ips: ",
    "super_device_ids: ",
    "nic: ",
    "python: ",
    "a",
    "node1",
    "8",
    "0",
    "-1",
    "99999999999999999999",
    "1e9",
    ".inf",
    ".nan",
    "0x7fffffffffffffff",
    "&a ",
    "&b ",
    "*a",
    "*b",
    "!!float ",
    "!!int ",
    "!!str ",
    "!!binary ",
    "!!set ",
    "!!python/object:os.system ",
    "!x ",
    "? ",
    ": ",
    "[",
    "]",
    "{",
    "}",
    ", ",
    "'",
    '"',
    '"\\0"',
    '"\\ud800"',
    '"\\x7f"',
    "\x00",
    "\x7f",
    "\x85",
    "\ufeff",
    "#",
    "---",
    "...",
    "<<: ",
    "%YAML 1.1",
    "|",
    ">",
    "~",
    "null",
    "true",
    "A",
    "GLOG_v",
    "=",
]
JSON_TOKENS = [
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    '"version"',
    '"1.0"',
    '"1.2"',
    '"server_count"',
    '"server_list"',
    '"device"',
    '"device_id"',
    '"device_ip"',
    '"rank_id"',
    '"server_id"',
    '"status"',
    '"completed"',
    '"super_pod_list"',
    '"super_pod_id"',
    '"host_ip"',
    '"super_device_id"',
    '"0"',
    '"1"',
    '"8"',
    '"192.1.27.6"',
    '"10.0.0.1"',
    "0",
    "-1",
    "1e999",
    "NaN",
    "Infinity",
    "-Infinity",
    "99999999999999999999999",
    "true",
    "null",
    '"\\u0000"',
    '"\\ud800"',
    '"\\udc00x"',
    " ",
    "\n",
    '"',
    "\\",
]
HOSTFILE_TOKENS = [
    "node1",
    "node2",
    "localhost",
    " ",
    "\n",
    "slots=",
    "max_slots=",
    "slot=",
    "cpu=",
    ":",
    "8",
    "0",
    "-1",
    "１",
    "99999999999999999999",
    "#",
    "=",
    "[::1]",
    "\x00",
    "\t",
    "\r",
    ",",
    "@",
]
ENV_TOKENS = ["A", "B_1", "export ", "=", "'", '"', "\n", " ", "#", "\x00", "\ud800", "1", "x", "\t", "=="]


def token_text(tokens: list) -> st.SearchStrategy[str]:
    return st.lists(st.sampled_from(tokens), max_size=80).map("".join)


@SETTINGS
@given(token_text(YAML_TOKENS))
def test_cluster_yaml_token_soup(text: str) -> None:
    check_inventory(outcome(lambda: parse_cluster_yaml(text, "c.yaml")))


@SETTINGS
@given(token_text(JSON_TOKENS))
def test_rank_table_token_soup(text: str) -> None:
    check_table_text(text)


@SETTINGS
@given(token_text(HOSTFILE_TOKENS))
def test_hostfile_token_soup(text: str) -> None:
    check_inventory(outcome(lambda: parse_hostfile(text, "h.txt")))
    check_inventory(outcome(lambda: parse_host_list(text)))
    outcome(lambda: apply_filters(parse_host_list("node1:8,node2:8"), include=text))


@SETTINGS
@given(token_text(ENV_TOKENS))
def test_env_token_soup(text: str) -> None:
    outcome(lambda: parse_env_file(text, "e.env"))
    outcome(lambda: parse_env_assignment(text))


# --------------------------------------------------------------------------------------------
# well-formed documents of random structure

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=20),
    st.sampled_from(["hosts", "host", "slots", "devices", "env", "ssh", "defaults", "device_ips", "a", "8"]),
)
KEYS = st.one_of(
    st.sampled_from(
        [
            "hosts",
            "defaults",
            "host",
            "slots",
            "max_slots",
            "devices",
            "env",
            "ssh",
            "port",
            "user",
            "device_ips",
            "super_device_ids",
            "nic",
            "python",
            "server_id",
            "addr",
            "A",
            "B",
        ]
    ),
    st.integers(),
    st.text(max_size=8),
)
#: Values nested a few levels (``ssh: {port: [...]}``): the parser refuses at the first field it cannot
#: use, so bigger trees cost Hypothesis's drawing, not paths through the parser.
VALUES = st.recursive(
    SCALARS, lambda inner: st.lists(inner, max_size=5) | st.dictionaries(KEYS, inner, max_size=5), max_leaves=10
)
CLUSTERS = st.fixed_dictionaries(
    {"hosts": st.lists(st.one_of(st.text(max_size=8), st.dictionaries(KEYS, VALUES, max_size=6)), max_size=4)},
    optional={"defaults": st.dictionaries(KEYS, VALUES, max_size=4)},
)


#: PyYAML's safe dumper, in C where PyYAML has it (the same documents, a fraction of the pure-Python one's time).
DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


@pytest.mark.heavy
@SETTINGS
@given(CLUSTERS, st.booleans())
def test_cluster_yaml_random_structures(doc: dict, flow: bool) -> None:
    try:
        text = yaml.dump(doc, Dumper=DUMPER, default_flow_style=flow, allow_unicode=True)
    except (yaml.YAMLError, UnicodeEncodeError):
        return  # PyYAML cannot write it; nothing to parse
    check_inventory(outcome(lambda: parse_cluster_yaml(text, "c.yaml")))


JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    st.text(max_size=12),
    st.sampled_from(["1.0", "1.2", "completed", "0", "1", "192.1.27.6"]),
)
JSON_KEYS = st.one_of(
    st.sampled_from(
        [
            "version",
            "server_count",
            "server_list",
            "device",
            "device_id",
            "device_ip",
            "rank_id",
            "server_id",
            "status",
            "super_pod_list",
            "super_pod_id",
            "host_ip",
            "super_device_id",
        ]
    ),
    st.text(max_size=6),
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(JSON_KEYS, inner, max_size=5),
    max_leaves=40,
)


@SETTINGS
@given(JSON_VALUES)
def test_rank_table_random_structures(value: Any) -> None:
    check_table_text(json.dumps(value))
