"""Bad input to every planning parser: one table per class of input, several values per class.

Each case asserts the whole one-line message (``where: what``) so a regression to a traceback,
a two-line error or an error without ``file:line`` fails here.  The resource side (time, memory)
of the worst cases is covered by tests/planning/test_parser_bounds.py.
"""

from __future__ import annotations

import pytest

from launcher.errors import InventoryError, MsLaunchError, PlanError, RankTableError
from launcher.planning.inventory import sources as inv_mod
from launcher.planning.inventory.clusteryaml import parse_cluster_yaml
from launcher.planning.inventory.filters import apply_filters
from launcher.planning.inventory.hostarg import parse_host_list
from launcher.planning.inventory.hostfile import parse_hostfile
from launcher.planning.inventory.model import MAX_DEVICE_ID, MAX_SLOTS
from launcher.planning.inventory.sources import local_inventory, read_inventory
from launcher.planning.job.envs import parse_env_assignment, parse_env_file
from launcher.planning.job.ranks import MAX_WORLD_SIZE, assign_ranks
from launcher.planning.ranktable import parse_rank_table_json, read_rank_table
from launcher.planning.ranktable.hccn import read_hccn_conf


def yaml_error(text: str) -> str:
    with pytest.raises(InventoryError) as info:
        parse_cluster_yaml(text, "c.yaml")
    message = str(info.value)
    assert "\n" not in message
    return message


def alias_bomb(levels: int, width: int, under: str) -> str:
    """``levels`` anchors, each a list of ``width`` aliases of the previous one, under key ``under``."""
    rows = [f"  a0: &a0 [{', '.join(['lol'] * width)}]"]
    for i in range(1, levels):
        rows.append(f"  a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]")
    return f"{under}:\n" + "\n".join(rows) + "\nhosts: [localhost]\n"


def map_bomb(levels: int, width: int) -> str:
    """Like :func:`alias_bomb`, with mappings of ``width`` keys instead of lists."""
    rows = ["  m0: &m0 {" + ", ".join(f"k{j}: v" for j in range(width)) + "}"]
    for i in range(1, levels):
        rows.append(f"  m{i}: &m{i} {{" + ", ".join(f"k{j}: *m{i - 1}" for j in range(width)) + "}")
    return "x:\n" + "\n".join(rows) + "\nhosts: [a]\n"


# --------------------------------------------------------------------------------------------
# YAML: aliases


@pytest.mark.parametrize(
    "text",
    [
        alias_bomb(9, 9, "unused"),  # the issue's repro: never read, still refused
        alias_bomb(9, 9, "defaults"),
        alias_bomb(30, 2, "x"),  # deep and narrow
        alias_bomb(3, 1000, "x"),  # shallow and wide
        map_bomb(9, 9),  # mappings instead of lists
    ],
    ids=["9x9-unused", "9x9-defaults", "30x2", "3x1000", "mappings"],
)
def test_yaml_alias_bombs_are_refused(text: str) -> None:
    message = yaml_error(text)
    assert message.startswith("c.yaml:")
    assert message.split(": ", 1)[1] == (
        f"the document expands to more than {inv_mod.MAX_YAML_NODES} YAML nodes (aliases count each time they are used)"
    )


def test_yaml_aliases_within_budget_still_work() -> None:
    text = (
        "defaults:\n  env: &e {A: '1'}\n"
        "hosts:\n  - host: a\n    slots: 2\n    env: *e\n  - host: b\n    slots: &s 2\n    max_slots: *s\n"
    )
    inv = parse_cluster_yaml(text, "c.yaml")
    assert [(h.name, h.slots, h.max_slots, h.env) for h in inv.hosts] == [
        ("a", 2, None, (("A", "1"),)),
        ("b", 2, 2, (("A", "1"),)),
    ]


@pytest.mark.parametrize(
    "text, message",
    [
        ("hosts: &h [*h]\n", "c.yaml:1: recursive alias *h (it is used inside its own anchor)"),
        ("hosts: &h {a: *h}\n", "c.yaml:1: recursive alias *h (it is used inside its own anchor)"),
        (
            "a: &x\n  b:\n    - c: [1, *x]\nhosts: []\n",
            "c.yaml:3: recursive alias *x (it is used inside its own anchor)",
        ),
        ("hosts: *nope\n", "c.yaml:1: undefined alias *nope"),
        ("hosts:\n  - *later\n  - &later a\n", "c.yaml:2: undefined alias *later"),
    ],
)
def test_yaml_recursive_and_undefined_aliases(text: str, message: str) -> None:
    assert yaml_error(text) == message


# --------------------------------------------------------------------------------------------
# YAML: depth


@pytest.mark.parametrize(
    "text",
    [
        "hosts: " + "[" * 100_000 + "]" * 100_000,
        "hosts: " + "{a: " * 100_000 + "}" * 100_000,
        "hosts: " + "[{a: " * 20_000 + "}]" * 20_000,
        "hosts:\n" + "".join(" " * (i + 1) + "-\n" for i in range(200)),
        "hosts:\n" + "".join(" " * (2 * i + 2) + f"k{i}:\n" for i in range(200)),
        "hosts:\n" + "".join("  " * (i + 1) + "- \n" for i in range(40)),
    ],
    ids=["flow-seq-100k", "flow-map-100k", "flow-mixed-40k", "block-seq-200", "block-map-200", "block-seq-40"],
)
def test_yaml_deep_nesting_is_refused(text: str) -> None:
    message = yaml_error(text)
    assert message.startswith("c.yaml:")
    assert message.endswith(f": nested deeper than {inv_mod.MAX_YAML_DEPTH} levels")


def test_yaml_3000_level_block_list_is_refused_by_size() -> None:
    text = "hosts:\n" + "".join(" " * (i + 1) + "-\n" for i in range(3000))
    assert len(text) > inv_mod.MAX_YAML_CHARS
    assert yaml_error(text) == "c.yaml: larger than 4 MiB; is this a cluster file?"


# --------------------------------------------------------------------------------------------
# YAML: tags, keys, control characters, surrogates


@pytest.mark.parametrize(
    "text, message",
    [
        ("!!float y: 1\n", "c.yaml:1: invalid YAML value 'y' for tag !!float: could not convert string to float: 'y'"),
        ("!!int y: 1\n", "c.yaml:1: invalid YAML value 'y' for tag !!int: invalid literal for int() with base 10: 'y'"),
        ("!!bool maybe: 1\n", "c.yaml:1: invalid YAML value 'maybe' for tag !!bool: 'maybe'"),
        ("hosts:\n  - host: a\n    !!timestamp slots: 1\n", None),
        (
            "hosts:\n  - host: a\n    slots: !!int " + "9" * 5000 + "\n",
            "c.yaml:3: integer '" + "9" * 40 + "...' has too many digits",
        ),
        ("hosts: !!set {a, b}\n", "c.yaml:1: unsupported tag 'tag:yaml.org,2002:set' on a collection"),
        ("hosts: !!omap [a: 1]\n", "c.yaml:1: unsupported tag 'tag:yaml.org,2002:omap' on a collection"),
        ("hosts: !custom [a]\n", "c.yaml:1: unsupported tag '!custom' on a collection"),
        ("hosts: [!!python/object:os.system a]\n", None),
        ("? [a, b]\n: 1\n", "c.yaml:1: mapping keys must be plain values"),
        ("? {a: b}\n: 1\n", "c.yaml:1: mapping keys must be plain values"),
        ("hosts: [a]\nhosts: [b]\n", "c.yaml:2: duplicate key 'hosts'"),
        (
            "hosts: [a]\n---\nhosts: [b]\n",
            "c.yaml:2: more than one YAML document ('---'); a cluster file is one document",
        ),
    ],
)
def test_yaml_tags_and_keys(text: str, message: str) -> None:
    got = yaml_error(text)
    if message is None:  # the exact wording comes from PyYAML; where it is and that it is one line is ours
        assert got.startswith("c.yaml:") and ("invalid YAML" in got)
    else:
        assert got == message


@pytest.mark.parametrize("char", ["\x00", "\x01", "\x08", "\x0b", "\x1b", "\x7f", "\x80", "\x9f", "\ufffe"])
@pytest.mark.parametrize("where", ["key", "value", "comment"])
def test_yaml_control_characters_name_the_line(char: str, where: str) -> None:
    body = {
        "key": f"hosts:\n  - host: a\n    sl{char}ots: 1\n",
        "value": f"hosts:\n  - host: a\n    slots: 1{char}\n",
        "comment": f"hosts:\n  - host: a\n    slots: 1 # {char}\n",
    }[where]
    message = yaml_error(body)
    assert message == f"c.yaml:3: invalid YAML: character U+{ord(char):04X} is not allowed in YAML (control character)"


@pytest.mark.parametrize(
    "text, line",
    [
        ('hosts:\n  - host: a\n    slots: 1\n    env: {A: "x\\0y"}\n', 4),
        ('hosts:\n  - host: a\n    slots: 1\n    env: {A: "\\x00"}\n', 4),
        ('hosts:\n  - host: a\n    slots: 1\n    nic: "e\\0th0"\n', 4),
        ('hosts:\n  - host: "a\\0"\n', 2),
        ('hosts:\n  - host: a\n    slots: 1\n    env: {"A\\0": x}\n', 4),
    ],
)
def test_yaml_nul_escapes_are_refused(text: str, line: int) -> None:
    message = yaml_error(text)
    assert message.startswith(f"c.yaml:{line}: value ")
    assert message.endswith(" contains a NUL character")


@pytest.mark.parametrize(
    "text, line",
    [
        ('hosts:\n  - host: a\n    slots: 1\n    env: {A: "\\ud800"}\n', 4),
        ('hosts:\n  - host: a\n    slots: 1\n    env: {A: "x\\udfffy"}\n', 4),
        ('hosts:\n  - host: a\n    python: "\\udc80"\n', 3),
    ],
)
def test_yaml_surrogate_escapes_are_refused(text: str, line: int) -> None:
    message = yaml_error(text)  # libyaml refuses the escape; PyYAML's pure parser builds it and we refuse it
    assert message.startswith(f"c.yaml:{line}: ")
    assert "surrogate" in message or "invalid Unicode character escape" in message


@pytest.mark.parametrize(
    "text, line", [("hosts:\n  - host: a\ud800\n", 2), ("\udc80", 1), ("a: 1\nb: 2\n# \udfff\n", 3)]
)
def test_yaml_text_with_surrogates_is_refused(text: str, line: int) -> None:
    assert yaml_error(text) == f"c.yaml:{line}: not Unicode text (lone surrogate)"


def test_yaml_pure_python_parser_gives_the_same_answers(monkeypatch) -> None:
    import yaml

    monkeypatch.delattr(yaml, "CSafeLoader", raising=False)
    assert yaml_error(alias_bomb(9, 9, "unused")).endswith("(aliases count each time they are used)")
    assert yaml_error("hosts: " + "[" * 50_000 + "]" * 50_000).endswith(
        f"nested deeper than {inv_mod.MAX_YAML_DEPTH} levels"
    )
    assert yaml_error("hosts: &h [*h]\n") == "c.yaml:1: recursive alias *h (it is used inside its own anchor)"
    assert yaml_error('hosts:\n  - host: a\n    slots: 1\n    env: {A: "\\ud800"}\n').startswith(
        "c.yaml:4: value '\\ud800' contains a lone surrogate"
    )
    assert (
        yaml_error("hosts:\n  - host: a\x00\n")
        == "c.yaml:2: invalid YAML: character U+0000 is not allowed in YAML (control character)"
    )
    assert [
        h.name for h in parse_cluster_yaml("hosts: [{host: a, slots: 1}, {host: b, slots: 2}]\n", "c.yaml").hosts
    ] == ["a", "b"]


# --------------------------------------------------------------------------------------------
# Numbers: what a host can claim


HUGE = ["99999999999999999999", "100000000", str(MAX_SLOTS + 1), "9" * 5000]


@pytest.mark.parametrize("value", HUGE)
@pytest.mark.parametrize("form", ["slots={}", "max_slots={}", ":{}"])
def test_hostfile_huge_slots(value: str, form: str) -> None:
    line = {
        "slots={}": f"node1 slots={value}",
        "max_slots={}": f"node1 slots=1 max_slots={value}",
        ":{}": f"node1:{value}",
    }[form]
    with pytest.raises(InventoryError) as info:
        parse_hostfile(f"# cluster\n{line}\n", "h.txt")
    what = {"slots={}": "slots", "max_slots={}": "max_slots", ":{}": "slot count after ':'"}[form]
    shown = repr(value if len(value) <= 40 else value[:40] + "...")
    assert str(info.value) == f"h.txt:2: {what} must be in 1..{MAX_SLOTS}, got {shown}"


@pytest.mark.parametrize("value", ["１２", "1_0", "+8", "0x10", "8.0", "-1", "٣", ""])
def test_hostfile_slots_must_be_ascii_digits(value: str) -> None:
    with pytest.raises(InventoryError) as info:
        parse_hostfile(f"node1 slots={value}\n", "h.txt")
    assert str(info.value) == f"h.txt:1: slots must be a positive integer, got {value!r}"


@pytest.mark.parametrize("value", HUGE)
def test_host_list_huge_slots(value: str) -> None:
    with pytest.raises(InventoryError) as info:
        parse_host_list(f"a:1,b:{value}")
    shown = repr(value if len(value) <= 40 else value[:40] + "...")
    assert str(info.value) == f"-H: slot count of 'b' must be in 1..{MAX_SLOTS}, got {shown} (write h1:8,h2:8)"


@pytest.mark.parametrize(
    "entry, line, message",
    [
        ("slots: 99999999999999999999", 3, f"hosts[0].slots must be in 1..{MAX_SLOTS}, got 99999999999999999999"),
        ("slots: 100000000", 3, f"hosts[0].slots must be in 1..{MAX_SLOTS}, got 100000000"),
        ("slots: 0x7fffffffffffffff", 3, f"hosts[0].slots must be in 1..{MAX_SLOTS}, got 9223372036854775807"),
        ("slots: 1e9", 3, "hosts[0].slots must be an integer"),
        ("slots: .inf", 3, "hosts[0].slots must be an integer"),
        ("slots: 2\n    max_slots: 100000000", 4, f"hosts[0].max_slots must be in 1..{MAX_SLOTS}, got 100000000"),
        (
            "slots: 1\n    devices: [99999999999999999999]",
            4,
            f"hosts[0].devices: device id must be in 0..{MAX_DEVICE_ID}, got 99999999999999999999",
        ),
        ("slots: 1\n    devices: [-1]", 4, "hosts[0].devices: device id must be >= 0, got -1"),
        (
            "slots: 1\n    device_ips: {99999999999999999999: 1.2.3.4}",
            4,
            f"hosts[0].device_ips: device id must be in 0..{MAX_DEVICE_ID}, got 99999999999999999999",
        ),
        ('slots: 1\n    device_ips: {"１": 1.2.3.4}', 4, "hosts[0].device_ips: device id must be an integer, got '１'"),
        ("slots: 1\n    ssh: {port: 99999999999999999999}", 4, "hosts[0].ssh.port must be 1..65535"),
    ],
)
def test_yaml_huge_numbers(entry: str, line: int, message: str) -> None:
    assert yaml_error(f"hosts:\n  - host: a\n    {entry}\n") == f"c.yaml:{line}: {message}"


def test_yaml_too_many_hosts() -> None:
    text = "hosts:\n" + "".join(f"- h{i}\n" for i in range(inv_mod.MAX_HOSTS + 1))
    assert yaml_error(text) == f"c.yaml:{inv_mod.MAX_HOSTS + 2}: more than {inv_mod.MAX_HOSTS} hosts"


def test_hostfile_too_many_hosts() -> None:
    text = "".join(f"h{i}\n" for i in range(inv_mod.MAX_HOSTS + 1))
    with pytest.raises(InventoryError) as info:
        parse_hostfile(text, "h.txt")
    assert str(info.value) == f"h.txt:{inv_mod.MAX_HOSTS + 1}: more than {inv_mod.MAX_HOSTS} hosts"


@pytest.mark.parametrize(
    "spec, message",
    [
        ("a:99999999999999999999", f"--include: slot ids in 'a:99999999999999999999' must be in 0..{MAX_DEVICE_ID}"),
        (
            "a:" + "1" * 5000,
            f"--include: slot ids in {('a:' + '1' * 5000)[:40] + '...'!r} must be in 0..{MAX_DEVICE_ID}",
        ),
        ("a:-1", "--include: slot ids in 'a:-1' must be integers, e.g. a:0,1"),
        ("a:１", "--include: slot ids in 'a:１' must be integers, e.g. a:0,1"),
    ],
)
def test_filter_huge_ids(spec: str, message: str) -> None:
    with pytest.raises(InventoryError) as info:
        apply_filters(parse_host_list("a:2"), include=spec)
    assert str(info.value) == message


@pytest.mark.parametrize("np", [MAX_WORLD_SIZE + 1, 10**8, 10**20])
def test_np_is_bounded(np: int) -> None:
    with pytest.raises(PlanError) as info:
        assign_ranks(parse_host_list("a:8"), np=np)
    assert str(info.value) == f"--np: --np must be in 1..{MAX_WORLD_SIZE}, got {np}"
    with pytest.raises(InventoryError) as info2:
        local_inventory(np)
    assert str(info2.value) == f"--np: this machine alone takes 1..{MAX_SLOTS} ranks, got {np}"


def test_every_slot_of_a_huge_inventory_is_bounded() -> None:
    hosts = MAX_WORLD_SIZE // MAX_SLOTS + 1
    inv = parse_hostfile("".join(f"h{i} slots={MAX_SLOTS}\n" for i in range(hosts)), "h.txt")
    with pytest.raises(PlanError) as info:
        assign_ranks(inv)
    assert str(info.value) == (
        f"--np: the inventory has {hosts * MAX_SLOTS} slots, more than the {MAX_WORLD_SIZE} ranks one job may have; "
        "pass --np, --per-host or --include"
    )
    assert len(assign_ranks(inv, np=16)) == 16


# --------------------------------------------------------------------------------------------
# Env values


@pytest.mark.parametrize(
    "text, message",
    [
        ("A=1\nB=x\x00y\n", "e.env:2: B: the value contains a NUL character, which no process environment can hold"),
        ("A=\x00\n", "e.env:1: A: the value contains a NUL character, which no process environment can hold"),
        ("export A='\x00'\n", "e.env:1: A: the value contains a NUL character, which no process environment can hold"),
        (
            "\n\nA=\ud800\n",
            "e.env:3: A: the value contains a lone surrogate (\\ud800-\\udfff), which is not UTF-8 text",
        ),
        ("A=x\udcff\n", "e.env:1: A: the value contains a lone surrogate (\\ud800-\\udfff), which is not UTF-8 text"),
        ("A=B=C\nX=Y=Z\n", None),
        ("A B=1\n", "e.env:1: expected NAME=VALUE, got 'A B=1'"),
        ("1A=1\n", "e.env:1: expected NAME=VALUE, got '1A=1'"),
        ("A-B=1\n", "e.env:1: expected NAME=VALUE, got 'A-B=1'"),
        ("=1\n", "e.env:1: expected NAME=VALUE, got '=1'"),
        ("A\x00=1\n", "e.env:1: expected NAME=VALUE, got 'A\\x00=1'"),
        (
            "A=" + "x" * (128 * 1024) + "\n",
            f"e.env:1: A: NAME=VALUE is longer than {inv_mod.MAX_ENV_ENTRY_BYTES} bytes, the most Linux passes to a "
            "process",
        ),
    ],
)
def test_env_file_values(text: str, message: str) -> None:
    if message is None:
        assert parse_env_file(text, "e.env") == (("A", "B=C"), ("X", "Y=Z"))
        return
    with pytest.raises(MsLaunchError) as info:
        parse_env_file(text, "e.env")
    assert str(info.value) == message


@pytest.mark.parametrize(
    "text, message",
    [
        ("A=x\x00", "--env: A: the value contains a NUL character, which no process environment can hold"),
        ("A=\udc80", "--env: A: the value contains a lone surrogate (\\ud800-\\udfff), which is not UTF-8 text"),
        ("A\n=1", "--env: expected NAME=VALUE, got 'A\\n=1'"),
        ("A B=1", "--env: expected NAME=VALUE, got 'A B=1'"),
        ("=1", "--env: expected NAME=VALUE, got '=1'"),
    ],
)
def test_env_flag_values(text: str, message: str) -> None:
    with pytest.raises(PlanError) as info:
        parse_env_assignment(text)
    assert str(info.value) == message


@pytest.mark.parametrize(
    "env, message",
    [
        ("{A: [1, 2]}", "hosts[0].env.A must be a string or number"),
        ("{A: {b: c}}", "hosts[0].env.A must be a string or number"),
        ("{A: null}", "hosts[0].env.A must be a string or number"),
        ("{A: true}", "hosts[0].env.A must be a string or number"),
        ("{A=B: x}", "hosts[0].env: invalid variable name 'A=B'"),
        ("{1: x}", "hosts[0].env: invalid variable name 1"),
        ('{"A\\nB": x}', "hosts[0].env: invalid variable name 'A\\nB'"),
        ("[A=1]", "hosts[0].env must be a mapping"),
    ],
)
def test_yaml_env_values(env: str, message: str) -> None:
    assert yaml_error(f"hosts:\n  - host: a\n    slots: 1\n    env: {env}\n") == f"c.yaml:4: {message}"


@pytest.mark.parametrize(
    "field, value",
    [
        ("ssh: {user: ", '"root\\nProxyCommand x"}'),
        ("ssh: {key: ", '"k\\ty"}'),
        ("nic: ", '"eth0\\r"'),
        ("python: ", '"/usr/bin/python3\\x1b"'),
        ("hccn_conf: ", '"a\\x85b"'),
        ("server_id: ", '"s\\x7f"'),
    ],
)
def test_yaml_names_and_paths_refuse_control_characters(field: str, value: str) -> None:
    message = yaml_error(f"hosts:\n  - host: a\n    slots: 1\n    {field}{value}\n")
    assert message.startswith("c.yaml:4: hosts[0].")
    assert " must not contain control characters, got " in message


def test_yaml_env_values_may_hold_newlines() -> None:
    inv = parse_cluster_yaml('hosts:\n  - host: a\n    slots: 1\n    env: {A: "x\\ny\\tz"}\n', "c.yaml")
    assert inv.hosts[0].env == (("A", "x\ny\tz"),)


def test_yaml_env_numbers_become_strings() -> None:
    inv = parse_cluster_yaml("hosts:\n  - host: a\n    slots: 1\n    env: {A: 2, B: 0.5, C: x}\n", "c.yaml")
    assert inv.hosts[0].env == (("A", "2"), ("B", "0.5"), ("C", "x"))


# --------------------------------------------------------------------------------------------
# JSON rank tables


@pytest.mark.parametrize(
    "text, message",
    [
        ("[" * 100_000 + "]" * 100_000, "invalid rank table: JSON nested deeper than 64 levels"),
        ("[" * 900 + "]" * 900, "invalid rank table: JSON nested deeper than 64 levels"),
        ('{"a":' * 70 + "1" + "}" * 70, "invalid rank table: JSON nested deeper than 64 levels"),
        (
            '{"version": "1.0", "x": ' + "[" * 65 + "]" * 65 + "}",
            "invalid rank table: JSON nested deeper than 64 levels",
        ),
        ("1" + "0" * 5000, "invalid JSON: number '" + ("1" + "0" * 5000)[:40] + "...' has too many digits"),
        ('{"rank_id": ' + "9" * 101 + "}", "invalid JSON: number '" + "9" * 40 + "...' has too many digits"),
        ("1e999999", "invalid JSON: number '1e999999' is too large"),
        ('{"a": -1e400}', "invalid JSON: number '-1e400' is too large"),
        ('{"version": NaN}', "invalid JSON: NaN is not a JSON number"),
        ('{"version": Infinity}', "invalid JSON: Infinity is not a JSON number"),
        ("[-Infinity]", "invalid JSON: -Infinity is not a JSON number"),
        ('{"a": 1, "a": 1}', "key 'a' appears twice in one object; keep one"),
        (
            '{"server_list": [{"server_id": "x", "server_id": "y"}]}',
            "key 'server_id' appears twice in one object; keep one",
        ),
        ('{"version": "1.0\\u0000"}', "version: string '1.0\\x00' holds a NUL character"),
        (
            '{"server_list": [{"server_id": "\\ud800"}]}',
            "server_list[0].server_id: string '\\ud800' holds a lone surrogate (not Unicode text)",
        ),
        ('{"\\udc00": 1}', "[key]: string '\\udc00' holds a lone surrogate (not Unicode text)"),
    ],
)
def test_rank_table_json_refusals(text: str, message: str) -> None:
    with pytest.raises(RankTableError) as info:
        parse_rank_table_json(text, "t.json")
    assert str(info.value) == f"t.json: {message}"


@pytest.mark.parametrize(
    "data, line",
    [
        (b'{"version": "1.0"}\n\xff\n', 2),
        (b"\xfe\xff{}", 1),
        (b'{\n\n"a": "\xc3\x28"}', 3),
        (b'{"a": "\xed\xa0\x80"}', 1),
    ],
)
def test_rank_table_not_utf8(tmp_path, data: bytes, line: int) -> None:
    path = tmp_path / "t.json"
    path.write_bytes(data)
    with pytest.raises(RankTableError) as info:
        read_rank_table(str(path))
    assert str(info.value).startswith(f"{path}:{line}: not UTF-8 text (")
    assert str(info.value).endswith("); is this a rank table file?")


# --------------------------------------------------------------------------------------------
# File size caps (every reader)


READERS = [
    (read_inventory, "h.txt", "a hostfile", "8 MiB"),
    (read_inventory, "c.yaml", "a cluster file", "4 MiB"),
    (read_hccn_conf, "hccn.conf", "an hccn.conf file", "1 MiB"),
    (read_rank_table, "t.json", "a rank table file", "16 MiB"),
]


@pytest.mark.parametrize("reader, name, kind, size", READERS)
def test_oversized_files_are_refused(tmp_path, reader, name: str, kind: str, size: str) -> None:
    path = tmp_path / name
    limit = {"16 MiB": 16 << 20, "8 MiB": 8 << 20, "4 MiB": 4 << 20, "1 MiB": 1 << 20}[size]
    path.write_bytes(b"# x\n" * (limit // 4) + b"#")
    with pytest.raises(MsLaunchError) as info:
        reader(str(path))
    assert str(info.value) == f"{path}: larger than {size}; is this {kind}?"


@pytest.mark.parametrize("reader, name, kind, size", READERS)
def test_endless_files_are_refused(tmp_path, reader, name: str, kind: str, size: str) -> None:
    path = tmp_path / name
    path.symlink_to("/dev/zero")
    with pytest.raises(MsLaunchError) as info:
        reader(str(path))
    assert str(info.value) == f"{path}: larger than {size}; is this {kind}?"


def test_yaml_text_over_its_own_cap(tmp_path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("hosts: [a]\n" + "#" * (4200 * 1024) + "\n")
    with pytest.raises(InventoryError) as info:
        read_inventory(str(path))
    assert str(info.value) == f"{path}: larger than 4 MiB; is this a cluster file?"
    with pytest.raises(InventoryError) as info:
        parse_cluster_yaml("#" * (4200 * 1024), "c.yaml")
    assert str(info.value) == "c.yaml: larger than 4 MiB; is this a cluster file?"


@pytest.mark.parametrize("path", ["bad\x00path", "/proc/self/mem"])
def test_unreadable_paths(path: str) -> None:
    with pytest.raises(InventoryError) as info:
        read_inventory(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{path}: cannot read a hostfile: ")


def test_crlf_files_keep_their_line_numbers(tmp_path) -> None:
    path = tmp_path / "h.txt"
    path.write_bytes(b"a slots=1\r\nb slots=2\r\nc slots=x\r\n")
    with pytest.raises(InventoryError) as info:
        read_inventory(str(path))
    assert str(info.value) == f"{path}:3: slots must be a positive integer, got 'x'"


def test_messages_clip_long_input() -> None:
    with pytest.raises(InventoryError) as info:
        parse_hostfile("a " + "x" * 100_000 + "\n", "h.txt")
    assert len(str(info.value)) < 200
    with pytest.raises(InventoryError) as info:
        parse_host_list("," + "a" * 100_000)
    assert len(str(info.value)) < 200
