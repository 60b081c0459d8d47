"""``doctor --health`` on this machine's hosts, and its bad input: one line, exit 2."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.harness.cli import run_process


def _doctor(tmp_path, *args: str) -> subprocess.CompletedProcess:
    return run_process("doctor", "--health", *args, cwd=str(tmp_path), timeout=120)


def test_json_of_local_hosts(tmp_path) -> None:
    r = _doctor(tmp_path, "--json", "-H", "localhost")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["ok"] is True and data["network"] == "not checked: every host is this machine"
    assert [(h["host"], h["verdict"], h["mbps"]) for h in data["hosts"]] == [("localhost", "ok", None)]
    assert data["hosts"][0]["gflops"] > 0


@pytest.mark.parametrize(
    "args, needle",
    [
        (
            ("--health-kernel", "bogus", "-H", "localhost"),
            "unknown --health-kernel 'bogus'; use one of numpy, mindspore",
        ),
        (("--health-threshold", "2", "-H", "localhost"), "--health-threshold must be between 0 and 1"),
        ((), "pass --hosts FILE or -H LIST"),
    ],
)
def test_bad_input_is_one_line(tmp_path, args, needle) -> None:
    r = _doctor(tmp_path, *args)
    assert r.returncode == 2 and needle in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


FAKE_TOOLS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "fake_devices")


def _devices_doctor(tmp_path, case: str, *args: str) -> subprocess.CompletedProcess:
    """``doctor --health`` of this machine with the fake device tools answering as ``case``."""
    folder = tmp_path / "fake"
    (folder / "hosts").mkdir(parents=True, exist_ok=True)
    (folder / "hosts" / "default").write_text(f"{case}\nnet=7\n")
    env = dict(os.environ, MSLAUNCH_DEVICE_TOOLS_DIR=FAKE_TOOLS, MSLAUNCH_FAKE_DEVICES_DIR=str(folder))
    return run_process("doctor", "--health", *args, cwd=str(tmp_path), env=env, timeout=120)


def test_a_gpu_with_ecc_errors_makes_its_host_faulty(tmp_path) -> None:
    r = _devices_doctor(tmp_path, "gpu_ecc_error", "--json", "-H", "localhost:4", "--device-target", "GPU")
    assert r.returncode == 1, r.stderr
    data = json.loads(r.stdout)
    assert data["devices"] == {"target": "gpu", "source": "--device-target", "checks": "try", "note": None}
    host = data["hosts"][0]
    assert host["verdict"] == "faulty" and host["reason"].startswith("faulty: GPU 3: "), host["reason"]
    assert [d["device"] for d in host["devices"]["devices"]] == [0, 1, 2, 3]
    assert [d["verdict"] for d in host["devices"]["devices"]] == ["ok", "ok", "ok", "faulty"]


def test_a_missing_tool_fails_a_host_only_when_required(tmp_path) -> None:
    yaml = tmp_path / "hosts.yaml"
    yaml.write_text('hosts:\n  - host: localhost\n    slots: 2\n    device_ips: {"0": 192.98.0.7, "1": 192.98.1.7}\n')
    r = _devices_doctor(tmp_path, "ascend_missing_npu_smi", "--hosts", str(yaml), "--device-target", "ascend")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "devices not checked: NPU 0-1: npu-smi not found on localhost" in r.stdout, r.stdout
    r = _devices_doctor(
        tmp_path,
        "ascend_missing_npu_smi",
        "--hosts",
        str(yaml),
        "--device-target",
        "ascend",
        "--device-checks",
        "require",
    )
    assert r.returncode == 1 and "localhost faulty: devices not checked: NPU 0-1: npu-smi not found" in r.stdout, (
        r.stdout
    )


def test_the_program_names_the_target_and_off_skips_the_devices(tmp_path) -> None:
    r = _devices_doctor(tmp_path, "ascend_healthy", "--json", "-H", "localhost:2", "train.py", "--device_target=Ascend")
    data = json.loads(r.stdout)
    assert r.returncode == 0 and data["devices"]["source"] == "program", r.stdout
    assert data["hosts"][0]["reason"].endswith("; devices ok: NPU 0-1")
    r = _devices_doctor(
        tmp_path, "gpu_ecc_error", "--json", "-H", "localhost:4", "--device-target", "gpu", "--device-checks", "off"
    )
    data = json.loads(r.stdout)
    assert r.returncode == 0 and "devices" not in data["hosts"][0], r.stdout
    assert data["devices"]["note"] == "devices not checked: --device-checks off"


@pytest.mark.parametrize(
    "args, needle",
    [
        (("--device-target", "tpu", "-H", "localhost"), "unknown device target 'tpu'; use one of ascend, gpu, cpu"),
        (
            ("--device-checks", "maybe", "-H", "localhost"),
            "unknown --device-checks 'maybe'; use one of off, try, require",
        ),
    ],
)
def test_bad_device_options_are_one_line(tmp_path, args, needle) -> None:
    r = _doctor(tmp_path, *args)
    assert r.returncode == 2 and needle in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
