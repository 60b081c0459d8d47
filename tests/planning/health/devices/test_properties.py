"""Property tests of the device checks: whatever the tools print (junk, text assembled from their
formats' pieces, a recorded table cut short), the parsers raise nothing but ToolOutputError, the
verdicts never raise, and junk or a truncated table is never taken for a healthy device."""

from __future__ import annotations

from typing import Dict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from launcher.planning.health.devices import (
    HostDeviceSpec,
    Outcome,
    ToolOutputError,
    device_commands,
    judge_host,
    judge_hosts,
)
from launcher.planning.health.devices.commands import OUTPUT_LIMIT
from launcher.planning.health.devices.hccntool import parse_ip, parse_link, parse_net_health, parse_tls
from launcher.planning.health.devices.npusmi import parse_npu_smi_info
from launcher.planning.health.devices.nvsmi import parse_compute_apps, parse_gpu_query
from tests.harness.hypo import examples
from tests.planning.health.devices.test_parsers import fixture

SETTINGS = settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
ANY_TEXT = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=300)
PIECES = st.sampled_from(
    [
        "|",
        "+",
        "-",
        "=",
        " ",
        "\n",
        "\r",
        "NPU",
        "Name",
        "Health",
        "OK",
        "Warning",
        "Chip",
        "Phy-ID",
        "Bus-Id",
        "Process id",
        "Process name",
        "Process memory(MB)",
        "No running processes found in NPU ",
        "NA",
        "0",
        "1",
        "7",
        "15",
        "30496",
        "910B3",
        "link status",
        "net health status",
        ":",
        " : ",
        "UP",
        "DOWN",
        "Success",
        "Init",
        "Receive timeout",
        "ipaddr",
        "netmask",
        "192.98.1.1",
        "255.255.255.0",
        "tls switch[",
        "]",
        "[N/A]",
        "Yes",
        "No",
        ", ",
        "GPU-6f1c0b8e",
        "python3",
        "+---------------------------+",
        "+===========================+",
        "[WARNING]",
    ]
)
TOKENS = st.lists(PIECES, max_size=60).map("".join)
PARSERS = (parse_npu_smi_info, parse_link, parse_net_health, parse_ip, parse_tls, parse_gpu_query, parse_compute_apps)

ASCEND = HostDeviceSpec("h", (0, 1), 2, ((0, "192.98.0.1"), (1, "192.98.1.1")))
GPU = HostDeviceSpec("g", (0, 1), 2)


def _parse_all(text: str) -> None:
    for parse in PARSERS:
        try:
            parse(text)
        except ToolOutputError as exc:
            assert "\n" not in exc.message


@SETTINGS
@given(st.one_of(ANY_TEXT, TOKENS))
def test_parsers_raise_only_their_error(text):
    _parse_all(text)


def _same_text(spec: HostDeviceSpec, target: str, text: str, code: int) -> Dict[str, Outcome]:
    return {c.key: Outcome("exited", code, text, "") for c in device_commands(target, spec)}


@SETTINGS
@given(ANY_TEXT, st.integers(-9, 255))
def test_junk_is_never_a_healthy_device(text, code):
    for target, spec in (("ascend", ASCEND), ("gpu", GPU)):
        report = judge_host(target, spec, _same_text(spec, target, text, code))
        assert report.status != "ok"
        assert all(c.status != "ok" for d in report.devices for c in d.checks), report.to_json()
        assert "\n" not in report.reason()


OUTCOMES = st.builds(
    Outcome,
    st.sampled_from(["exited", "not_found", "timed_out", "error", "skipped", "bogus"]),
    st.one_of(st.none(), st.integers(-9, 255)),
    st.one_of(TOKENS, ANY_TEXT),
    ANY_TEXT,
    st.one_of(st.none(), st.floats(0, 100)),
    st.one_of(st.none(), ANY_TEXT),
)


@SETTINGS
@given(st.data())
def test_any_outcomes_give_verdicts(data):
    for target, spec in (("ascend", ASCEND), ("gpu", GPU)):
        keys = [c.key for c in device_commands(target, spec)]
        outcomes = {k: data.draw(OUTCOMES) for k in keys if data.draw(st.booleans())}
        (report,) = judge_hosts(target, [spec], {spec.host: outcomes})
        assert [d.device for d in report.devices] == [0, 1] and report.status in ("ok", "faulty", "not_checked")
        assert "\n" not in report.reason() and report.to_json()["verdict"] == report.status


TABLES = (
    "npu_smi_910b_healthy.txt",
    "npu_smi_910_93_healthy.txt",
    "npu_smi_910b_warning_line.txt",
    "npu_smi_npu_id_layout.txt",
)


@SETTINGS
@given(st.sampled_from(TABLES), st.floats(0, 1, exclude_max=True))
def test_a_truncated_npu_smi_table_is_never_healthy(name, where):
    text = fixture(name)
    cut = text[: int(len(text.rstrip()) * where)]
    report = judge_host("ascend", ASCEND, {"npu-smi info": Outcome("exited", 0, cut, "")}, roce=False)
    assert all(c.status != "ok" for d in report.devices for c in d.checks), (len(cut), report.to_json())


@SETTINGS
@given(st.floats(0, 1, exclude_max=True))
def test_a_truncated_gpu_list_is_never_a_healthy_host(where):
    spec = HostDeviceSpec("g", tuple(range(8)), 8)
    text = fixture("nvsmi_gpus_healthy.csv")
    cut = text[: int(len(text.rstrip()) * where)]
    outcomes = {
        "nvidia-smi --query-gpu": Outcome("exited", 0, cut, ""),
        "nvidia-smi --query-compute-apps": Outcome("exited", 0, "", ""),
    }
    assert judge_host("gpu", spec, outcomes).status != "ok"


def test_the_whole_tables_are_healthy():
    """The properties above cut before the end; the whole recordings are healthy (so they can fail)."""
    for name in TABLES:
        report = judge_host(
            "ascend",
            HostDeviceSpec("h", (0,), 1),
            {"npu-smi info": Outcome("exited", 0, fixture(name), "")},
            roce=False,
        )
        assert report.status == "ok", name


LONG = OUTPUT_LIMIT  # the most the probe returns of a stream


@pytest.mark.parametrize(
    "text",
    [
        "link status:" + " " * LONG + "x",
        "net health status :" + " \t" * (LONG // 2) + "\n",
        "ipaddr:" + " " * LONG,
        "tls switch[" + " " * LONG,
        "|" * LONG + "\n",
        "| Health |" + " |" * (LONG // 2) + "\n",
        "+" + "-" * LONG + "=\n",
        ("| 0 910B | OK | x |\n" * (LONG // 20)),
        ", " * LONG,
        "GPU-" + "a" * LONG + ", 1, x, 1\n",
        ("link status" + " " * 100 + "\n") * (LONG // 112),
    ],
)
def test_long_outputs_are_read_in_one_pass(text):
    """Inputs a backtracking regular expression would take minutes on (the suite's timeout fails
    such a run); here every parser answers at once."""
    _parse_all(text)
