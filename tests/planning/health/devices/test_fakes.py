"""The fake npu-smi, hccn_tool and nvidia-smi (tests/scripts/fake_devices) as plain processes:
each case prints its recorded outputs with the tools' exit statuses, chosen per host, and the
device checks judge what they print as they judge the real tools."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from typing import Dict, Mapping, Optional

import pytest

from launcher.planning.health.devices import (
    DeviceCommand,
    HostDeviceSpec,
    Outcome,
    ToolSetup,
    device_commands,
    judge_host,
    judge_hosts,
)
from launcher.planning.health.devices.nvsmi import GPU_QUERY
from tests.harness.paths import TESTS

FAKES = os.path.join(TESTS, "scripts", "fake_devices")
SETUP = ToolSetup(
    npu_smi=(os.path.join(FAKES, "npu-smi"),),
    hccn_tool=(os.path.join(FAKES, "hccn_tool"),),
    nvidia_smi=(os.path.join(FAKES, "nvidia-smi"),),
    hccn_timeout=5.0,
    npu_smi_timeout=5.0,
    nvidia_timeout=5.0,
)


def run(command: DeviceCommand, env: Mapping[str, str]) -> Outcome:
    """What the probe does with one command (its candidates, its time limit), here."""
    exe: Optional[str] = next((c for c in command.candidates if c.startswith("/") and os.access(c, os.X_OK)), None)
    exe = exe or next((shutil.which(c) for c in command.candidates if not c.startswith("/") and shutil.which(c)), None)
    if exe is None:
        return Outcome("not_found")
    t0 = time.monotonic()
    try:
        proc = subprocess.run(
            [exe, *command.argv], capture_output=True, text=True, env=dict(env), timeout=command.timeout
        )
    except subprocess.TimeoutExpired:
        return Outcome("timed_out", seconds=command.timeout)
    return Outcome("exited", proc.returncode, proc.stdout, proc.stderr, time.monotonic() - t0)


def outcomes(target: str, spec: HostDeviceSpec, env: Mapping[str, str], setup: ToolSetup = SETUP) -> Dict[str, Outcome]:
    return {c.key: run(c, env) for c in device_commands(target, spec, setup)}


@pytest.fixture
def fake_dir(tmp_path):
    (tmp_path / "hosts").mkdir()

    def host(name: str, case: str, **values: str) -> Dict[str, str]:
        lines = [case] + [f"{k}={v}" for k, v in values.items()]
        (tmp_path / "hosts" / name).write_text("\n".join(lines) + "\n")
        return {"PATH": os.environ["PATH"], "MSLAUNCH_FAKE_DEVICES_DIR": str(tmp_path), "MSLAUNCH_FAKE_HOST": name}

    host.dir = str(tmp_path)  # type: ignore[attr-defined]
    return host


TWO = HostDeviceSpec("h", (0, 1), 2, ((0, "192.98.0.5"), (1, "192.98.1.5")))


def faults(target: str, spec: HostDeviceSpec, found: Dict[str, Outcome]):
    report = judge_host(target, spec, found)
    return report.status, [
        (d.device, c.check, c.status, c.evidence) for d in report.devices for c in d.checks if c.status != "ok"
    ]


@pytest.mark.parametrize(
    "case, status, found",
    [
        ("ascend_healthy", "ok", []),
        ("ascend_link_down", "faulty", [(0, "link", "faulty", "link status: DOWN")]),
        ("ascend_net_health_timeout", "faulty", [(1, "net_health", "faulty", "net health status: Receive timeout")]),
        ("ascend_occupied", "faulty", [(0, "process", "faulty", "held by pid 351533 (no process name, 51409 MB)")]),
        ("ascend_ip_mismatch", "faulty", [(0, "ip", "faulty", "ipaddr:192.98.0.250, the job uses 192.98.0.5")]),
        (
            "ascend_busy",
            "not_checked",
            [(n, "net_health", "not_checked", "hccn_tool is busy, please try again.") for n in (0, 1)],
        ),
        (
            "ascend_missing_npu_smi",
            "not_checked",
            [
                (
                    n,
                    c,
                    "not_checked",
                    "npu-smi not found on h (npu-smi info exited with 127: sh: 1: npu-smi: not found)",
                )
                for n in (0, 1)
                for c in ("health", "process")
            ],
        ),
    ],
)
@pytest.mark.e2e
def test_ascend_cases(fake_dir, case, status, found):
    assert faults("ascend", TWO, outcomes("ascend", TWO, fake_dir("h", case, net="5"))) == (status, found)


@pytest.mark.e2e
def test_a_device_hccn_tool_does_not_know(fake_dir):
    spec = HostDeviceSpec("h", (6, 7), 2)
    got = faults("ascend", spec, outcomes("ascend", spec, fake_dir("h", "ascend_device_not_exist", net="5")))
    assert got == (
        "faulty",
        [(7, c, "faulty", "The device is not exist!") for c in ("link", "net_health", "ip", "tls")],
    )


def test_910_93_case_checks_16_devices(fake_dir):
    spec = HostDeviceSpec("h", tuple(range(16)), 16)
    env = fake_dir("h", "ascend_910_93_healthy", net="5")
    found = {"npu-smi info": run(device_commands("ascend", spec, SETUP)[0], env)}
    assert judge_host("ascend", spec, found, SETUP, roce=False).status == "ok"


@pytest.mark.e2e
def test_tls_mismatch_across_hosts(fake_dir):
    specs = [HostDeviceSpec(f"h{k}", (0,), 1) for k in (1, 2, 3)]
    answers = {
        s.host: outcomes("ascend", s, fake_dir(s.host, case, net=str(k)))
        for k, (s, case) in enumerate(zip(specs, ("ascend_healthy", "ascend_healthy", "ascend_tls_enabled")))
    }
    reports = judge_hosts("ascend", specs, answers, setup=SETUP)
    assert [r.status for r in reports] == ["ok", "ok", "faulty"]
    assert (
        reports[2].reason()
        == "NPU 0: tls switch[1], 2 of 3 devices have tls switch[0] (0 on h1, h2 vs 1 on h3) (hccn_tool -tls -g)"
    )


G = HostDeviceSpec("g", (2, 3), 2)


@pytest.mark.parametrize(
    "case, status, found",
    [
        ("gpu_healthy", "ok", []),
        (
            "gpu_ecc_error",
            "faulty",
            [
                (3, "ecc", "faulty", "uncorrected ECC errors (volatile): 2"),
                (3, "remapped_rows", "faulty", "remapped rows pending (reset the GPU): Yes"),
            ],
        ),
        ("gpu_occupied", "faulty", [(2, "process", "faulty", "held by pid 30496 (python3, 61440 MiB)")]),
        ("gpu_na", "faulty", [(n, "listed", "faulty", "not listed by nvidia-smi (it lists 0-1)") for n in (2, 3)]),
        (
            "gpu_missing",
            "not_checked",
            [
                (
                    n,
                    c,
                    "not_checked",
                    f"nvidia-smi not found on g (nvidia-smi --query-{q} exited with 127: sh: 1: nvidia-smi: not found)",
                )
                for n in (2, 3)
                for c, q in (("health", "gpu"), ("process", "compute-apps"))
            ],
        ),
    ],
)
@pytest.mark.e2e
def test_gpu_cases(fake_dir, case, status, found):
    assert faults("gpu", G, outcomes("gpu", G, fake_dir("g", case))) == (status, found)


@pytest.mark.e2e
def test_gpu_driver_failure_exits_9(fake_dir):
    env = fake_dir("g", "gpu_driver_failed")
    out = run(device_commands("gpu", G, SETUP)[0], env)
    assert (out.status, out.exit_code, out.stdout) == (
        "exited",
        9,
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running.\n",
    )
    assert judge_host("gpu", G, outcomes("gpu", G, env)).status == "faulty"


@pytest.mark.parametrize(
    "case, target, key",
    [("ascend_hang", "ascend", "hccn_tool -i 0 -link -g"), ("gpu_hang", "gpu", "nvidia-smi --query-gpu")],
)
def test_a_hanging_tool_times_out(fake_dir, case, target, key):
    spec = HostDeviceSpec("h", (0,), 1)
    setup = ToolSetup(
        npu_smi=SETUP.npu_smi,
        hccn_tool=SETUP.hccn_tool,
        nvidia_smi=SETUP.nvidia_smi,
        hccn_timeout=1.0,
        nvidia_timeout=1.0,
    )
    cmd = next(c for c in device_commands(target, spec, setup) if c.key == key)
    t0 = time.monotonic()
    out = run(cmd, fake_dir("h", case, net="1"))
    assert out == Outcome("timed_out", seconds=1.0) and time.monotonic() - t0 < 30
    report = judge_host(target, spec, {key: out}, setup)
    assert f"{key.replace('-i 0 ', '')} timed out after 1 s on h" in report.reason()


@pytest.mark.e2e
def test_the_host_is_chosen_by_slurm_ssh_or_the_default(fake_dir):
    env = fake_dir("10.213.0.2", "ascend_link_down")
    fake_dir("node3", "ascend_healthy")
    fake_dir("default", "ascend_busy")
    base = {"PATH": os.environ["PATH"], "MSLAUNCH_FAKE_DEVICES_DIR": env["MSLAUNCH_FAKE_DEVICES_DIR"]}
    tool = os.path.join(FAKES, "hccn_tool")

    def link(**extra: str) -> str:
        proc = subprocess.run(
            [tool, "-i", "0", "-link", "-g"], capture_output=True, text=True, env={**base, **extra}, timeout=30
        )
        return proc.stdout

    assert link(SSH_CONNECTION="10.213.0.9 52144 10.213.0.2 22") == "link status: DOWN\n"
    assert link(SLURMD_NODENAME="node3") == "link status: UP\n"
    assert (
        link(SSH_CONNECTION="10.213.0.9 52144 10.213.0.7 22") == "link status: UP\n"
    )  # default: busy only for -net_health
    assert link(MSLAUNCH_FAKE_HOST="node3", SLURMD_NODENAME="10.213.0.2") == "link status: UP\n"


@pytest.mark.parametrize(
    "setup_hosts, argv, code, words",
    [
        ({}, ["npu-smi", "info"], 2, "fake device tool: no case for host 'h'"),
        ({"h": "nosuchcase"}, ["npu-smi", "info"], 2, "fake device tool: no case file nosuchcase.json"),
        (
            {"h": "gpu_healthy"},
            ["npu-smi", "info"],
            2,
            "fake device tool: case 'gpu_healthy' has no answer for 'npu-smi info'",
        ),
        (
            {"h": "ascend_healthy"},
            ["hccn_tool", "-i", "0", "-ip", "-g"],
            2,
            "fake device tool: case 'ascend_healthy' needs net=... in the host file",
        ),
    ],
)
def test_misconfigured_fakes_say_what_to_configure(tmp_path, setup_hosts, argv, code, words):
    (tmp_path / "hosts").mkdir()
    for name, case in setup_hosts.items():
        (tmp_path / "hosts" / name).write_text(case + "\n")
    env = {"PATH": os.environ["PATH"], "MSLAUNCH_FAKE_DEVICES_DIR": str(tmp_path), "MSLAUNCH_FAKE_HOST": "h"}
    proc = subprocess.run(
        [os.path.join(FAKES, argv[0]), *argv[1:]], capture_output=True, text=True, env=env, timeout=30
    )
    assert proc.returncode == code and proc.stdout == "" and proc.stderr.startswith(words)


def test_every_case_names_fixtures_that_exist():
    import json

    cases = os.path.join(FAKES, "..", "..", "planning", "data", "devices", "cases")
    names = sorted(os.listdir(cases))
    assert len(names) >= 17
    for name in names:
        with open(os.path.join(cases, name)) as f:
            data = json.load(f)
        assert data.get("base", "ascend_healthy") + ".json" in names, name
        for key, entry in data.items():
            if isinstance(entry, dict) and "file" in entry:
                assert os.path.isfile(os.path.join(cases, "..", entry["file"])), (name, key)


# ------------------------------------------------------------------ the fake prints a real H100's lines

H100_UUID = "GPU-b551444d-db4c-4d40-2848-f97c3a1abde6"
H100_GPU = f"0, {H100_UUID}, 0, [N/A], No\n"  # /work/shared/notes/device-tools.md, driver 580.159.04
H100_APP = f"{H100_UUID}, 476, python3, 8710\n"


@pytest.mark.parametrize(
    "case, args, out",
    [
        ("gpu_h100", ["--query-gpu=" + GPU_QUERY, "--format=csv,noheader,nounits"], H100_GPU),
        (
            "gpu_h100",
            ["--query-gpu=" + GPU_QUERY, "--format=csv"],
            "index, uuid, ecc.errors.uncorrected.volatile.total, retired_pages.pending, remapped_rows.pending\n"
            + H100_GPU,
        ),
        (
            "gpu_h100",
            ["--query-compute-apps=gpu_uuid,pid,process_name,used_memory", "--format=csv,noheader,nounits"],
            "",
        ),
        (
            "gpu_h100",
            ["--query-compute-apps=gpu_uuid,pid,process_name,used_memory", "--format=csv"],
            "gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n",
        ),
        (
            "gpu_h100_occupied",
            ["--query-compute-apps=gpu_uuid,pid,process_name,used_memory", "--format=csv,noheader,nounits"],
            H100_APP,
        ),
        (
            "gpu_h100_occupied",
            ["--query-compute-apps=gpu_uuid,pid,process_name,used_memory", "--format=csv"],
            f"gpu_uuid, pid, process_name, used_gpu_memory [MiB]\n{H100_UUID}, 476, python3, 8710 MiB\n",
        ),
    ],
)
def test_the_fake_nvidia_smi_prints_the_lines_of_a_real_h100(fake_dir, case, args, out):
    proc = subprocess.run(
        [os.path.join(FAKES, "nvidia-smi"), *args], capture_output=True, text=True, env=fake_dir("g", case), timeout=30
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, out, "")


@pytest.mark.e2e
def test_the_checks_say_of_the_fake_h100_what_they_said_of_the_real_one(fake_dir):
    """On the real host: idle ``devices ok: GPU 0``; with the process ``GPU 0: held by pid 476 (python3, 8710 MiB)``."""
    spec = HostDeviceSpec("g", (0,), 1)
    assert faults("gpu", spec, outcomes("gpu", spec, fake_dir("g", "gpu_h100"))) == ("ok", [])
    assert faults("gpu", spec, outcomes("gpu", spec, fake_dir("g", "gpu_h100_occupied"))) == (
        "faulty",
        [(0, "process", "faulty", "held by pid 476 (python3, 8710 MiB)")],
    )
