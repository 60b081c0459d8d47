"""Which devices a job uses: its device target, and the device ids (and IPs) per host of its plan."""

from __future__ import annotations

import pytest

from launcher.errors import PlanError
from launcher.planning.build import build_plan
from launcher.planning.health.devices import (
    HostDeviceSpec,
    TargetChoice,
    device_target,
    inventory_devices,
    planned_devices,
    rank_table_device_ips,
)
from launcher.planning.inventory.clusteryaml import parse_cluster_yaml
from launcher.planning.inventory.hostfile import parse_hostfile
from launcher.planning.job.spec import JobSpec
from launcher.planning.ranktable import build_rank_table


@pytest.mark.parametrize(
    "program, env, flag, choice",
    [
        (("train.py", "--device-target", "Ascend"), {}, None, TargetChoice("ascend", "program", "Ascend")),
        (("train.py", "--device_target=GPU"), {}, None, TargetChoice("gpu", "program", "GPU")),
        (
            ("train.py", "--device-target=CPU", "--device_target", "Davinci"),
            {},
            None,
            TargetChoice("ascend", "program", "Davinci"),
        ),
        (("train.py", "--epochs", "1"), {"DEVICE_TARGET": "GPU"}, None, TargetChoice("gpu", "DEVICE_TARGET", "GPU")),
        (("train.py", "--device-target", "CPU"), {"DEVICE_TARGET": "GPU"}, None, TargetChoice("cpu", "program", "CPU")),
        (("train.py", "--", "--device-target", "GPU"), {}, None, TargetChoice(None, "none")),
        (("train.py", "--device-target"), {"DEVICE_TARGET": ""}, None, TargetChoice(None, "none")),
        (("train.py", "--device-target", "TPU"), {}, None, TargetChoice(None, "program", "TPU")),
        (
            ("train.py", "--device-target", "GPU"),
            {"DEVICE_TARGET": "GPU"},
            "ascend",
            TargetChoice("ascend", "--device-target", "ascend"),
        ),
        ((), {}, "CPU", TargetChoice("cpu", "--device-target", "CPU")),
    ],
)
def test_device_target(program, env, flag, choice):
    assert device_target(program, env, flag) == choice


def test_target_notes():
    assert TargetChoice("gpu", "program", "GPU").note() is None
    assert TargetChoice(None, "none").note() == (
        "devices not checked: no device target (the program's --device-target, "
        "DEVICE_TARGET, or doctor --device-target ascend|gpu|cpu)"
    )
    assert (
        TargetChoice(None, "program", "TPU").note()
        == "devices not checked: unknown device target 'TPU' (program); known: Ascend, GPU, CPU"
    )


@pytest.mark.parametrize("flag", ["tpu", "davinci", ""])
def test_doctor_flag_is_refused_when_unknown(flag):
    with pytest.raises(PlanError) as err:
        device_target((), {}, flag)
    assert str(err.value) == f"--device-target: unknown device target {flag!r}; use one of ascend, gpu, cpu"


INV = parse_hostfile("h1 slots=4\nh2 slots=4\nh3 slots=2\n", "hosts.txt")


def spec(**kw):
    base = dict(
        inventory=INV, program=("train.py",), python="/usr/bin/python3", cwd="/work", job_dir="/work/j", job_id="j"
    )
    base.update(kw)
    return JobSpec(**base)


def test_planned_devices_with_a_spare():
    plan = build_plan(spec(np=6, per_host=3))
    assert planned_devices(plan, INV) == [
        HostDeviceSpec("h1", (0, 1, 2), 3),
        HostDeviceSpec("h2", (0, 1, 2), 3),
        HostDeviceSpec("h3", (0, 1), 2),
    ]
    assert planned_devices(plan) == [HostDeviceSpec("h1", (0, 1, 2), 3), HostDeviceSpec("h2", (0, 1, 2), 3)]


def test_planned_devices_follow_the_inventory_device_ids_and_ips():
    inv = parse_cluster_yaml(
        "hosts:\n"
        "  - {host: a, slots: 2, devices: [4, 6], device_ips: {4: 192.98.4.1, 6: 192.98.6.1}}\n"
        "  - {host: b, slots: 2, devices: [0, 1], device_ips: {0: 192.98.0.2, 1: 192.98.1.2}}\n",
        "c.yaml",
    )
    ips = {"a": {4: "192.98.4.1", 6: "192.98.6.1"}, "b": {0: "192.98.0.2", 1: "192.98.1.2"}}
    plan = build_plan(spec(inventory=inv, method="ranktable", device_ips=ips))
    assert planned_devices(plan, inv, ips) == [
        HostDeviceSpec("a", (4, 6), 2, ((4, "192.98.4.1"), (6, "192.98.6.1"))),
        HostDeviceSpec("b", (0, 1), 2, ((0, "192.98.0.2"), (1, "192.98.1.2"))),
    ]
    table = build_rank_table(inv, ips)
    assert rank_table_device_ips(table, inv.hosts) == ips
    assert inventory_devices(inv) == [HostDeviceSpec("a", (4, 6), 2), HostDeviceSpec("b", (0, 1), 2)]


def test_rank_table_ips_by_server_id_or_address_and_junk_ignored():
    inv = parse_cluster_yaml("hosts:\n  - {host: n1, addr: 10.0.0.1, slots: 1}\n  - {host: n2, slots: 1}\n", "c.yaml")
    table = {
        "server_list": [
            {"server_id": "10.0.0.1", "device": [{"device_id": "0", "device_ip": "192.98.0.1", "rank_id": "0"}]},
            {"server_id": "10.9.9.9", "device": [{"device_id": "0", "device_ip": "192.98.0.9", "rank_id": "1"}]},
            {"server_id": "n2", "device": [{"device_id": "x", "device_ip": "192.98.0.2"}, "junk"]},
            "junk",
        ]
    }
    assert rank_table_device_ips(table, inv.hosts) == {"n1": {0: "192.98.0.1"}}
    assert rank_table_device_ips([], inv.hosts) == {} and rank_table_device_ips({"server_list": 3}, inv.hosts) == {}
