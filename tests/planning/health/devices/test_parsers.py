"""The device tools' parsers: npu-smi info's tables, hccn_tool's lines, nvidia-smi's CSV, on the
recorded and composed outputs of tests/planning/data/devices (sources in its README)."""

from __future__ import annotations

import os

import pytest

from launcher.planning.health.devices.hccntool import failure_line, parse_ip, parse_link, parse_net_health, parse_tls
from launcher.planning.health.devices.model import ToolOutputError
from launcher.planning.health.devices.npusmi import parse_npu_smi_info
from launcher.planning.health.devices.nvsmi import field_state, parse_compute_apps, parse_gpu_query
from tests.harness.paths import TESTS

DATA = os.path.join(TESTS, "planning", "data", "devices")


def fixture(name: str) -> str:
    with open(os.path.join(DATA, name), encoding="utf-8") as f:
        return f.read()


def table(name: str):
    info = parse_npu_smi_info(fixture(name))
    return (
        [(d.device, d.npu, d.chip, d.name, d.health) for d in info.devices],
        [(p.npu, p.chip, p.pid, p.name, p.memory_mb) for p in info.processes],
        sorted(info.free_npus),
    )


B910 = [(i, i, 0, "910B2", "OK") for i in range(8)]


@pytest.mark.parametrize(
    "name, devices, processes, free",
    [
        ("npu_smi_910b_healthy.txt", B910, [], list(range(8))),
        ("npu_smi_910b_warning_line.txt", B910, [], list(range(8))),
        ("npu_smi_910b_health_warning.txt", B910[:3] + [(3, 3, 0, "910B2", "Warning")] + B910[4:], [], list(range(8))),
        ("npu_smi_910b_occupied_container.txt", B910, [(0, 0, 351533, "", "51409")], list(range(1, 8))),
        (
            "npu_smi_910_93_healthy.txt",
            [(2 * n + c, n, c, "Ascend910", "OK") for n in range(8) for c in (0, 1)],
            [],
            list(range(8)),
        ),
        (
            "npu_smi_npu_id_layout.txt",
            [(0, 0, None, "Ascend950DT", "OK"), (1, 1, None, "Ascend950DT", "OK")],
            [(1, None, 107304, "python", "39912")],
            [0],
        ),
    ],
)
def test_npu_smi_info_layouts(name, devices, processes, free):
    assert table(name) == (devices, processes, free)


def test_npu_smi_process_rows_belong_to_their_chip_on_910_93():
    text = fixture("npu_smi_910_93_healthy.txt").replace(
        "| No running processes found in NPU 2                                                            |",
        "| 2       1                 | 4242          | python                   | 1024                    |",
    )
    info = parse_npu_smi_info(text)
    owners = {d.device: [p.pid for p in info.processes_on(d)] for d in info.devices if d.npu == 2}
    assert owners == {4: [], 5: [4242]}


@pytest.mark.parametrize(
    "text, words",
    [
        ("", "npu-smi info printed no device table (no Health column): (nothing)"),
        (
            "dcmi model initialized failed, because the device is used. ret is -8020\n",
            "npu-smi info printed no device table (no Health column): dcmi model initialized failed, because the "
            "device is used. ret is -8020",
        ),
        (
            fixture("npu_smi_910b_healthy.txt").split("| NPU     Chip")[0],
            "npu-smi info printed no process table (its output ends early)",
        ),
        (
            fixture("npu_smi_910b_healthy.txt")[:-40],
            "npu-smi info's output ends early, inside its process table: "
            "+===========================+===============+==============",
        ),
        (
            fixture("npu_smi_910b_healthy.txt").replace(
                "| 0                         | 0000:C1:00.0", "| x                         | 0000:C1:00.0"
            ),
            "npu-smi info: the chip row of NPU 0 has no chip index: x | 0000:C1:00.0 | 0 0 / 0 3407 / 65536",
        ),
        (
            fixture("npu_smi_910b_healthy.txt")
            .replace("| 30496", "| pid")
            .replace("No running processes found in NPU 4", "4       0     | x | y | z"),
            "npu-smi info: a process row is not in its header's layout: 4 0 x y z",
        ),
    ],
)
def test_npu_smi_info_refuses_what_is_not_its_table(text, words):
    with pytest.raises(ToolOutputError) as err:
        parse_npu_smi_info(text)
    assert err.value.message == words


@pytest.mark.parametrize(
    "name, value",
    [
        ("hccn_link_up.txt", "UP"),
        ("hccn_link_up_spaced.txt", "UP"),
        ("hccn_link_down.txt", "DOWN"),
        ("hccn_link_partial.txt", "PARTIAL LINK"),
    ],
)
def test_link_status(name, value):
    assert parse_link(fixture(name)) == value


@pytest.mark.parametrize(
    "name, value",
    [
        ("hccn_net_health_success.txt", "Success"),
        ("hccn_net_health_init.txt", "Init"),
        ("hccn_net_health_receive_timeout.txt", "Receive timeout"),
        ("hccn_net_health_socket_fail.txt", "Socket fail"),
    ],
)
def test_net_health(name, value):
    assert parse_net_health(fixture(name)) == value


def test_ip_and_tls():
    assert parse_ip(fixture("hccn_ip.txt")) == ("192.98.1.1", "255.255.255.0")
    assert [
        parse_tls(fixture(n)) for n in ("hccn_tls_disabled.txt", "hccn_tls_enabled.txt", "hccn_tls_old_driver.txt")
    ] == ["0", "1", "0"]


@pytest.mark.parametrize(
    "parse, text, words",
    [
        (
            parse_link,
            "link status: UPP\n",
            "hccn_tool -link -g: unknown link status 'UPP' (known: UP, DOWN, PARTIAL LINK, NA)",
        ),
        (
            parse_link,
            "Command execute failed!\n",
            "hccn_tool -link -g printed no 'link status' line: Command execute failed!",
        ),
        (parse_net_health, "net health status: Succ\n", "hccn_tool -net_health -g: unknown net health status 'Succ'"),
        (parse_ip, "ipaddr:192.98.1.1\n", "hccn_tool -ip -g printed no 'netmask' line: ipaddr:192.98.1.1"),
        (
            parse_ip,
            "ipaddr:192.98.1\nnetmask:255.255.255.0\n",
            "hccn_tool -ip -g: ipaddr '192.98.1' is not an IPv4 address",
        ),
        (parse_tls, "dev_id:0, tls switch[", "hccn_tool -tls -g printed no 'tls switch[k]': dev_id:0, tls switch["),
    ],
)
def test_hccn_refusals(parse, text, words):
    with pytest.raises(ToolOutputError) as err:
        parse(text)
    assert err.value.message == words


@pytest.mark.parametrize(
    "name, found",
    [
        ("hccn_busy.txt", ("hccn_tool is busy, please try again.", "not_checked")),
        ("hccn_device_not_exist.txt", ("The device is not exist!", "faulty")),
        ("hccn_command_failed.txt", ("Command execute failed!", "not_checked")),
        ("hccn_link_is_down.txt", ("Execute failed: Link status is down.", "faulty")),
        ("hccn_ip_not_preset.txt", ("Get ipconf failed, because no ip was preset there!", "faulty")),
        ("hccn_link_up.txt", None),
    ],
)
def test_failure_lines(name, found):
    assert failure_line(fixture(name)) == found


def test_gpu_query():
    rows = parse_gpu_query(fixture("nvsmi_gpus_ecc_error.csv"))
    assert [(r.index, r.ecc_uncorrected, r.retired_pending, r.remapped_pending) for r in rows] == [
        (i, "2" if i == 3 else "0", "Yes" if i == 3 else "No", "No") for i in range(8)
    ]
    assert rows[0].uuid == "GPU-6f1c0b8e-4b7a-2d3e-9a51-0c2d4f6e8a10"
    assert [(r.index, r.ecc_uncorrected) for r in parse_gpu_query(fixture("nvsmi_gpus_with_header.csv"))] == [(0, "0")]
    assert [(r.ecc_uncorrected, r.retired_pending) for r in parse_gpu_query(fixture("nvsmi_gpus_na.csv"))] == [
        ("[N/A]", "[N/A]"),
        ("[Not Supported]", "[N/A]"),
    ]


def test_compute_apps():
    assert parse_compute_apps(fixture("nvsmi_apps_none.csv")) == ()
    (app,) = parse_compute_apps(fixture("nvsmi_apps_occupied.csv"))
    assert (app.gpu_uuid, app.pid, app.name, app.used_memory) == (
        "GPU-6f1c0b8e-4b7a-2d3e-9a51-0c2d4f6e8a12",
        30496,
        "python3",
        "61440",
    )
    (app,) = parse_compute_apps("GPU-abc, 12, worker, shard 0, 256 MiB\n")
    assert (app.name, app.used_memory) == ("worker, shard 0", "256 MiB")


@pytest.mark.parametrize(
    "parse, text",
    [
        (parse_gpu_query, "0, GPU-abc, 0, No\n"),
        (parse_gpu_query, "x, GPU-abc, 0, No, No\n"),
        (parse_gpu_query, "0, 1, 0, No, No\n"),
        (parse_compute_apps, "GPU-abc, 12\n"),
        (parse_compute_apps, "GPU-abc, pid, python, 1\n"),
        (parse_compute_apps, "No running processes found\n"),
    ],
)
def test_nvidia_smi_lines_out_of_format(parse, text):
    with pytest.raises(ToolOutputError):
        parse(text)


@pytest.mark.parametrize(
    "value, kind, state",
    [
        ("0", "count", ("ok", 0)),
        ("2", "count", ("bad", 2)),
        ("[N/A]", "count", ("unsupported", None)),
        ("[Not Supported]", "count", ("unsupported", None)),
        ("", "count", ("unreadable", None)),
        ("[Unknown Error]", "count", ("unreadable", None)),
        ("No", "flag", ("ok", 0)),
        ("Yes", "flag", ("bad", 1)),
        ("N", "flag", ("unreadable", None)),
        ("[N/A]", "flag", ("unsupported", None)),
    ],
)
def test_field_states(value, kind, state):
    assert field_state(value, kind) == state
