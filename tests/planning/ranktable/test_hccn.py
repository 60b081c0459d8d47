"""hccn.conf parsing (launcher.planning.ranktable.hccn)."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from launcher.errors import MsLaunchError, RankTableError
from launcher.planning.ranktable.hccn import is_ipv4, parse_hccn_conf, read_hccn_conf
from tests.harness.hypo import examples
from tests.harness.paths import TESTS

DATA = os.path.join(TESTS, "data")
SEED_IPS_1 = {i: f"192.{i % 4 + 1}.27.{6 + i // 4}" for i in range(8)}
SEED_IPS_2 = {i: f"192.{i % 4 + 1}.27.{8 + i // 4}" for i in range(8)}


@pytest.mark.parametrize(
    "text, expected",
    [
        ("", {}),
        ("# only a comment\n\n   \n", {}),
        ("address_0=192.1.27.6\n", {0: "192.1.27.6"}),
        ("address_0=192.1.27.6", {0: "192.1.27.6"}),  # no final newline
        ("  address_3 =  10.0.0.1\t\n", {3: "10.0.0.1"}),
        ("address_1=1.1.1.1 # the NIC of device 1\n", {1: "1.1.1.1"}),
        ("address_1=1.1.1.1\r\naddress_0=1.1.1.2\r\n", {1: "1.1.1.1", 0: "1.1.1.2"}),
        ("netmask_0=255.255.255.0\nnetdetect_0=192.1.27.1\ngateway_0=192.1.27.1\n", {}),
        ("netmask_0=not-an-ip\nnetdetect_0=\naddress_0=0.0.0.0\n", {0: "0.0.0.0"}),
        ("address_15=255.255.255.255\n", {15: "255.255.255.255"}),
        ("arp_dynamic_0=enable\nip_rule_0=add from 192.1.27.6\naddress_0=192.1.27.6\n", {0: "192.1.27.6"}),
    ],
)
def test_parse_ok(text: str, expected: dict) -> None:
    assert parse_hccn_conf(text, "h.conf") == expected


@pytest.mark.parametrize(
    "text, line, message",
    [
        (
            "address_0=192.1.27\n",
            1,
            "h.conf:1: address_0: '192.1.27' is not an IPv4 address; write it as "
            "address_<device_id>=<IPv4>, e.g. address_0=192.1.27.6 (hccn_tool -i <id> -ip -g prints it)",
        ),
        ("# c\naddress_0=256.1.1.1\n", 2, None),
        ("address_0=01.1.1.1\n", 1, None),
        ("address_0=\n", 1, None),
        ("address_0=1.1.1.1 2.2.2.2\n", 1, None),
        (
            "address_x=1.1.1.1\n",
            1,
            "h.conf:1: malformed address key 'address_x'; write it as "
            "address_<device_id>=<IPv4>, e.g. address_0=192.1.27.6 (hccn_tool -i <id> -ip -g prints it)",
        ),
        ("address=1.1.1.1\n", 1, None),
        ("address_-1=1.1.1.1\n", 1, None),
        ("Address_0=1.1.1.1\n", 1, None),
        (
            "address_0 1.1.1.1\n",
            1,
            "h.conf:1: expected key=value, got 'address_0 1.1.1.1'; hccn.conf lines look like address_0=192.1.27.6",
        ),
        ("=1.1.1.1\n", 1, None),
        (
            "address_0=1.1.1.1\n\naddress_0=1.1.1.2\n",
            3,
            "h.conf:3: device 0 has a second address (first at line 1); keep one address_N line per device",
        ),
    ],
)
def test_parse_errors(text: str, line: int, message: str) -> None:
    with pytest.raises(RankTableError) as info:
        parse_hccn_conf(text, "h.conf")
    assert info.value.path == "h.conf"
    assert info.value.line == line
    if message is not None:
        assert str(info.value) == message


def test_parse_without_path_names_a_placeholder() -> None:
    with pytest.raises(RankTableError) as info:
        parse_hccn_conf("address_0=x\n")
    assert str(info.value).startswith("<hccn.conf>:1: ")


@pytest.mark.parametrize(
    "text, ok",
    [
        ("0.0.0.0", True),
        ("192.1.27.6", True),
        ("255.255.255.255", True),
        ("256.0.0.1", False),
        ("1.2.3", False),
        ("1.2.3.4.5", False),
        ("01.2.3.4", False),
        ("1.2.3.4 ", False),
        ("", False),
        ("a.b.c.d", False),
        ("1.2.3.４", False),
        (None, False),
        (1234, False),
    ],
)
def test_is_ipv4(text: object, ok: bool) -> None:
    assert is_ipv4(text) is ok


def test_read_fixtures() -> None:
    # The fixtures carry netmask/netdetect/gateway lines, odd whitespace, comments and CRLF.
    assert read_hccn_conf(os.path.join(DATA, "hccn", "10.0.0.1.conf")) == SEED_IPS_1
    assert read_hccn_conf(os.path.join(DATA, "hccn", "10.0.0.2.conf")) == SEED_IPS_2


def test_read_errors(tmp_path) -> None:
    missing = str(tmp_path / "nope.conf")
    with pytest.raises(RankTableError) as info:
        read_hccn_conf(missing)
    assert str(info.value) == (
        f"{missing}: no such hccn.conf; copy /etc/hccn.conf from that server here, or point --hccn HOST=PATH at it"
    )
    with pytest.raises(RankTableError) as info:
        read_hccn_conf(str(tmp_path))
    assert str(info.value) == f"{tmp_path}: is a directory, not an hccn.conf file"
    binary = tmp_path / "bin.conf"
    binary.write_bytes(b"address_0=\xff\xfe\n")
    with pytest.raises(RankTableError) as info:
        read_hccn_conf(str(binary))
    assert info.value.path == str(binary)


@settings(max_examples=examples(300), deadline=None)
@given(st.text())
def test_parse_never_raises_anything_else(text: str) -> None:
    try:
        result = parse_hccn_conf(text, "x.conf")
    except MsLaunchError:
        return
    assert all(isinstance(k, int) and is_ipv4(v) for k, v in result.items())


_line = st.one_of(
    st.builds(lambda i, a, b, c, d: f"address_{i}={a}.{b}.{c}.{d}", st.integers(0, 20), *[st.integers(0, 300)] * 4),
    st.builds(
        lambda k, v: f"{k}={v}",
        st.sampled_from(["netmask_0", "netdetect_1", "address_", "address_1x"]),
        st.text(max_size=8),
    ),
    st.text(alphabet="address_=0123456789. #\t\r", max_size=30),
)


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(_line, max_size=12))
def test_parse_hccn_like_text(lines: list) -> None:
    try:
        parse_hccn_conf("\n".join(lines), "x.conf")
    except MsLaunchError as exc:
        assert exc.path == "x.conf" and isinstance(exc.line, int) and exc.line >= 1
