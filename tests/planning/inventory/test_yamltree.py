"""The bounded YAML composer (launcher/planning/inventory/yamltree.py) builds what ``yaml.safe_load`` builds.

Its scalars take fast paths (plain words by PyYAML's first-character table, decimal integers,
IPv4 addresses, quoted strings) in front of PyYAML's own resolver and constructor; these tests
hold every path to ``safe_load`` on documents mixing the tokens where YAML 1.1 is subtle, in
block and flow style, and check the line tables that messages use.  The bounds and the error
messages are tested in test_parser_tables.py and test_parser_bounds.py.
"""

from __future__ import annotations

import math
from typing import Any, List

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launcher.errors import InventoryError
from launcher.planning.inventory.yamltree import YamlMap, YamlSeq, yaml_tree
from tests.harness.hypo import examples

#: Scalars as written, where YAML 1.1 resolution is subtle (ints in other bases, sexagesimal,
#: booleans, nulls, floats, timestamps, IP-like text, quoted look-alikes, non-ASCII).
TOKENS = [
    "a",
    "node1",
    "node0001",
    "host_ip",
    "_x",
    "/opt/x",
    "a b",
    "é",
    "ñame",
    "Zeta",
    "x-1",
    "0",
    "7",
    "10",
    "123456789012345678",
    "1234567890123456789",
    "99999999999999999999999",
    "00",
    "010",
    "08",
    "0x1F",
    "0b101",
    "0o17",
    "1_000",
    "+1",
    "-1",
    "-0",
    "+0",
    "12:30",
    "190:20:30",
    "1:2",
    "1.5",
    "1e3",
    "1.0e+3",
    "6.8523015e+5",
    ".5",
    "-.inf",
    ".inf",
    ".Inf",
    ".NaN",
    "1.",
    "yes",
    "No",
    "on",
    "OFF",
    "y",
    "n",
    "Y",
    "true",
    "False",
    "TRUE",
    "null",
    "Null",
    "~",
    "nil",
    "10.0.0.1",
    "192.168.1.255",
    "256.1.1.1",
    "1.2.3",
    "1.2.3.4.5",
    "01.2.3.4",
    "1.2.3.4a",
    "2001-12-14",
    "2001-12-14t21:59:43.10-05:00",
    "2001-12-14 21:59:43.10 -5",
    "'quoted'",
    "'0'",
    "'yes'",
    "'10.0.0.1'",
    "''",
    '"dq"',
    '"1"',
    '"a\\tb"',
    '"\\u00e9"',
    "'it''s'",
]
KEYS = ["k0", "k1", "host", "slots", "0", "7", "'0'", "10.0.0.1", "x y", "'k0 '", "null"]  # distinct once constructed

#: The reference: PyYAML's loader on the parser the composer reads (libyaml when installed).
LOADER = getattr(yaml, "CSafeLoader", None) or yaml.SafeLoader

scalars = st.sampled_from(TOKENS)
documents = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(KEYS), inner, max_size=4),
    max_leaves=25,
)


def flow(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(flow(v) for v in value) + "]"
    return value


def block(value: Any, indent: int = 0) -> str:
    pad = " " * indent
    if isinstance(value, dict) and value:
        return "".join(
            f"{pad}{k}:\n{block(v, indent + 2)}" if isinstance(v, (dict, list)) and v else f"{pad}{k}: {flow(v)}\n"
            for k, v in value.items()
        )
    if isinstance(value, list) and value:
        return "".join(
            f"{pad}-\n{block(v, indent + 2)}" if isinstance(v, (dict, list)) and v else f"{pad}- {flow(v)}\n"
            for v in value
        )
    return f"{pad}{flow(value)}\n"


def comparable(value: Any) -> Any:
    """Plain dicts/lists with NaN spelled out (NaN != NaN) and types kept apart (True == 1)."""
    if isinstance(value, dict):
        return {comparable(k): comparable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [comparable(v) for v in value]
    if isinstance(value, float) and math.isnan(value):
        return ("nan",)
    return (type(value).__name__, value)


def line_tables_match(value: Any) -> bool:
    """Every collection has one line per value, each a positive line number."""
    if isinstance(value, (dict, list)):
        if not isinstance(value, (YamlMap, YamlSeq)) or len(value.lines) != len(value):
            return False
        lines: List[int] = list(value.lines.values()) if isinstance(value, dict) else value.lines
        items = value.values() if isinstance(value, dict) else value
        return all(isinstance(n, int) and n >= 1 for n in lines) and all(line_tables_match(v) for v in items)
    return True


def composed(text: str) -> Any:
    root = yaml_tree(text, "c.yaml")
    assert root is not None
    return root.value


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents, st.sampled_from(["block", "flow"]))
def test_composer_builds_what_safe_load_builds(document: Any, style: str) -> None:
    text = block(document) if style == "block" else flow(document) + "\n"
    try:
        expected = yaml.load(text, Loader=LOADER)
    except yaml.YAMLError:
        with pytest.raises(InventoryError):
            composed(text)
        return
    got = composed(text)
    assert comparable(got) == comparable(expected), text
    assert line_tables_match(got)


@pytest.mark.parametrize("token", TOKENS)
def test_every_token_alone(token: str) -> None:
    text = f"k: {token}\n"
    assert comparable(composed(text)) == comparable(yaml.load(text, Loader=LOADER))


def test_pure_python_parser_builds_the_same(monkeypatch) -> None:
    text = block({"hosts": [{"host": t, "v": [t, {"k0": t}]} for t in TOKENS]})
    with_libyaml = composed(text)
    monkeypatch.delattr(yaml, "CSafeLoader", raising=False)
    assert comparable(composed(text)) == comparable(with_libyaml) == comparable(yaml.safe_load(text))


def test_lines_name_where_each_value_starts() -> None:
    text = "defaults: {slots: 8}\nhosts:\n  - host: a\n    devices:\n      - 0\n      - 1\n  - b\n"
    root = yaml_tree(text, "c.yaml")
    assert root is not None and root.line == 1
    top = root.value
    assert top.lines == {"defaults": 1, "hosts": 3}
    assert top["defaults"].lines == {"slots": 1}
    hosts = top["hosts"]
    assert hosts.lines == [3, 7]
    assert hosts[0].lines == {"host": 3, "devices": 5}
    assert hosts[0]["devices"].lines == [5, 6]


def test_an_alias_is_its_anchors_value() -> None:
    top = composed("a: &x {k0: [1, 2]}\nb: *x\nc: &s text\nd: *s\n")
    assert top["b"] is top["a"] and top["d"] == "text"
    assert top.lines == {"a": 1, "b": 2, "c": 3, "d": 4}


@pytest.mark.parametrize("parser", ["libyaml", "pure Python"])
@pytest.mark.parametrize(
    "text, line",
    [
        (
            "hosts: " + "[" * 2_000 + "]" * 2_000 + "\n",
            1,
        ),  # past libyaml's own bound (1,000), which it meets while scanning ahead
        ("hosts: " + "{a: " * 2_000 + "1" + "}" * 2_000 + "\n", 1),
        ("hosts:\n" + "- " * 2_000 + "x\n", 2),  # block sequences, one per '- '
        ("hosts: " + "[" * 40 + "]" * 40 + "\n", 1),
    ],
)
def test_deep_nesting_is_one_message_whatever_the_parser(monkeypatch, parser: str, text: str, line: int) -> None:
    if parser == "pure Python":
        monkeypatch.delattr(yaml, "CSafeLoader", raising=False)
    elif getattr(yaml, "CSafeLoader", None) is None:
        pytest.skip("PyYAML is built without libyaml here")
    with pytest.raises(InventoryError) as info:
        yaml_tree(text, "c.yaml")
    assert str(info.value) == f"c.yaml:{line}: nested deeper than 32 levels"
