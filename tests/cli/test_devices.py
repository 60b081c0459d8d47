"""``launcher/cli/devices.py``: which target and devices the health check's device step gets
from a job's options, the tools' places, and the verdicts joined into the health result."""

from __future__ import annotations

import json

import pytest

from launcher.cli.devices import DeviceCheck, doctor_devices, job_device_ips, run_devices, tool_setup
from launcher.cli.options import JobOptions, job_options
from launcher.cli.spec import build_spec
from launcher.errors import PlanError
from launcher.execution.checks.health import HealthResult
from launcher.planning.build import build_plan
from launcher.planning.health.devices import ToolSetup
from launcher.planning.health.devices.model import HostDeviceSpec
from launcher.planning.health.devices.target import TargetChoice
from launcher.planning.health.rounds import Verdict


def opts(**kw) -> JobOptions:
    from launcher.cli.options import _FIELDS

    values = {name: None for name in _FIELDS}
    values.update(
        method="dynamic",
        master_port="8118",
        cpu_tune="off",
        no_python=False,
        mpi_hostfile=False,
        oversubscribe=False,
        program=["train.py"],
    )
    values.update(kw)
    return job_options(values)


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("")
    monkeypatch.delenv("DEVICE_TARGET", raising=False)
    monkeypatch.delenv("MSLAUNCH_DEVICE_TOOLS_DIR", raising=False)
    return tmp_path


def test_tool_setup_puts_the_folders_tools_first() -> None:
    default = ToolSetup()
    assert tool_setup({}) == default
    got = tool_setup({"MSLAUNCH_DEVICE_TOOLS_DIR": "/opt/fake"})
    assert got.npu_smi == ("/opt/fake/npu-smi",) + default.npu_smi
    assert got.hccn_tool == ("/opt/fake/hccn_tool",) + default.hccn_tool
    assert got.nvidia_smi == ("/opt/fake/nvidia-smi",) + default.nvidia_smi


def test_run_plans_the_devices_of_its_ranks_and_the_spares(in_tmp) -> None:
    spec = build_spec(opts(host_list="a:2,b:2,c:2", np=4, program=("train.py", "--device_target", "Ascend")))
    check = run_devices(spec, build_plan(spec), "try")
    assert check.choice == TargetChoice("ascend", "program", "Ascend")
    assert [(s.host, s.devices, s.ranks) for s in check.specs] == [("a", (0, 1), 2), ("b", (0, 1), 2), ("c", (0, 1), 2)]
    orders = check.orders()
    assert set(orders) == {"a", "b", "c"} and orders["a"]["commands"][0]["key"] == "npu-smi info"


def test_the_jobs_env_names_the_target_and_cpu_or_off_checks_nothing(in_tmp) -> None:
    spec = build_spec(opts(host_list="a:2", env=("DEVICE_TARGET=GPU",)))
    check = run_devices(spec, build_plan(spec), "require")
    assert check.choice.source == "DEVICE_TARGET" and check.policy == "require" and len(check.specs) == 1
    off = run_devices(spec, build_plan(spec), "off")
    assert off.orders() is None and off.summary()["note"] == "devices not checked: --device-checks off"
    cpu = doctor_devices(spec, "cpu", "try")
    assert cpu.specs == () and cpu.orders() == {}
    none = doctor_devices(build_spec(opts(host_list="a:2")), None, "try")
    assert none.orders() is None and none.summary()["note"].startswith("devices not checked: no device target")


def test_bad_values_are_refused(in_tmp) -> None:
    spec = build_spec(opts(host_list="a:2"))
    with pytest.raises(PlanError, match="--device-checks"):
        run_devices(spec, build_plan(spec), "sometimes")
    with pytest.raises(PlanError, match="unknown device target 'tpu'"):
        doctor_devices(spec, "tpu", "try")


def test_device_ips_from_the_yaml_or_a_given_rank_table(in_tmp) -> None:
    yaml = in_tmp / "c.yaml"
    yaml.write_text(
        'hosts:\n  - host: a\n    slots: 2\n    device_ips: {"0": 192.98.0.1, "1": 192.98.1.1}\n'
        "  - host: b\n    slots: 2\n"
    )
    spec = build_spec(opts(hosts=str(yaml)))
    assert job_device_ips(spec, spec.inventory) == {"a": {0: "192.98.0.1", 1: "192.98.1.1"}}
    check = doctor_devices(spec, "ascend", "try")
    assert [s.device_ips for s in check.specs] == [((0, "192.98.0.1"), (1, "192.98.1.1")), ()]
    table = {
        "version": "1.0",
        "server_count": "1",
        "status": "completed",
        "server_list": [
            {
                "server_id": "b",
                "host_nic_ip": "reserve",
                "device": [{"device_id": "1", "device_ip": "10.9.9.9", "rank_id": "0"}],
            }
        ],
    }
    (in_tmp / "rt.json").write_text(json.dumps(table))
    from dataclasses import replace

    assert job_device_ips(replace(spec, rank_table_file=str(in_tmp / "rt.json")), spec.inventory) == {
        "b": {1: "10.9.9.9"}
    }


def test_join_makes_a_host_with_a_faulty_device_faulty_and_names_a_silent_hosts_reason() -> None:
    spec_a, spec_b = HostDeviceSpec("a", (0,), 1), HostDeviceSpec("b", (0,), 1)
    check = DeviceCheck(TargetChoice("gpu", "--device-target", "gpu"), "try", (spec_a, spec_b))
    gpus = "0, GPU-x, 2, No, No\n"
    answer = {
        "outcomes": [
            {
                "key": "nvidia-smi --query-gpu",
                "status": "exited",
                "exit_code": 0,
                "stdout": gpus,
                "stderr": "",
                "seconds": 0.1,
            },
            {
                "key": "nvidia-smi --query-compute-apps",
                "status": "exited",
                "exit_code": 0,
                "stdout": "",
                "stderr": "",
                "seconds": 0.1,
            },
        ]
    }
    assert [c["key"] for c in check.orders()["a"]["commands"]] == [o["key"] for o in answer["outcomes"]]
    result = HealthResult(
        (
            Verdict("a", "ok", "ok: compute 5.00 GFLOPS", 5.0),
            Verdict("b", "faulty", "faulty: start: no answer in time"),
        ),
        1.0,
        "checked",
        {"a": answer},
        {"b": "faulty: start: no answer in time"},
    )
    a, b = check.join(result).verdicts
    assert a.status == "faulty" and a.reason.startswith("faulty: GPU 0: ") and "ECC" in a.reason.upper(), a.reason
    assert a.devices is not None and a.devices.status == "faulty"
    assert b.status == "faulty" and b.reason.startswith("faulty: start: no answer in time")
    assert b.devices is not None and b.devices.status == "not_checked"
    assert DeviceCheck(TargetChoice(None, "none")).join(result) is result
