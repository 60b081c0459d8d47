"""Device verdicts: per planned device, from the tools' outcomes, with the tools' own words; the
host's verdict under each --device-checks policy; the TLS switch across hosts; the commands."""

from __future__ import annotations

import json
from typing import Dict, List, Tuple

import pytest

from launcher.errors import PlanError
from launcher.planning.health.devices import (
    HostDevices,
    HostDeviceSpec,
    Outcome,
    ToolSetup,
    check_policy,
    device_commands,
    host_time_limit,
    judge_host,
    judge_hosts,
    outcomes_from_json,
    probe_order,
    with_devices,
)
from launcher.planning.health.rounds import Verdict, health_json
from tests.planning.health.devices.test_parsers import fixture

IPS = tuple((n, f"192.98.{n}.1") for n in range(8))
H1 = HostDeviceSpec("h1", tuple(range(8)), 8, IPS)


def ran(name_or_text: str, code: int = 0, stderr: str = "") -> Outcome:
    text = fixture(name_or_text) if name_or_text.endswith((".txt", ".csv")) else name_or_text
    return Outcome("exited", code, text, stderr, 0.1)


def ascend(spec: HostDeviceSpec = H1, **over: Outcome) -> Dict[str, Outcome]:
    """A healthy 910B host's outcomes, device N's IP 192.98.N.1; ``over``: key -> outcome, the
    key written with ``_`` for spaces and without ``-g`` (``hccn_tool_-i_3_-link``)."""
    out = {"npu-smi info": ran("npu_smi_910b_healthy.txt")}
    for n in spec.devices:
        out[f"hccn_tool -i {n} -link -g"] = ran("hccn_link_up.txt")
        out[f"hccn_tool -i {n} -net_health -g"] = ran("hccn_net_health_success.txt")
        out[f"hccn_tool -i {n} -ip -g"] = ran(f"ipaddr:192.98.{n}.1\nnetmask:255.255.255.0\n")
        out[f"hccn_tool -i {n} -tls -g"] = ran("hccn_tls_disabled.txt")
    for key, outcome in over.items():
        key = key.replace("_-", " -").replace("-i_", "-i ")
        out[key if key == "npu-smi info" else key + " -g"] = outcome
    return out


def verdicts(report: HostDevices) -> List[Tuple[int, str, List[Tuple[str, str, str]]]]:
    """Every device's verdict and its non-ok checks (check, verdict, evidence)."""
    return [
        (d.device, d.status, [(c.check, c.status, c.evidence) for c in d.checks if c.status != "ok"])
        for d in report.devices
    ]


def only(device: int, status: str, checks: List[Tuple[str, str, str]], n: int = 8) -> list:
    return [(i, status, checks) if i == device else (i, "ok", []) for i in range(n)]


def test_healthy_910b_host():
    report = judge_host("ascend", H1, ascend())
    assert verdicts(report) == [(i, "ok", []) for i in range(8)]
    assert report.status == "ok" and report.reason() == "devices ok: NPU 0-7"
    assert (
        judge_host("ascend", H1, ascend(), roce=False).reason()
        == "devices ok: NPU 0-7; device NICs (hccn_tool) not checked"
    )
    assert [(c.check, c.evidence) for c in report.devices[2].checks] == [
        ("health", "Health OK"),
        ("process", "no running process"),
        ("link", "link status: UP"),
        ("net_health", "net health status: Success"),
        ("ip", "ipaddr:192.98.2.1"),
        ("tls", "tls switch[0]"),
    ]


def test_healthy_910_93_host_checks_its_16_devices():
    spec = HostDeviceSpec("a3", tuple(range(16)), 16, tuple((n, f"192.98.{n}.1") for n in range(16)))
    report = judge_host("ascend", spec, ascend(spec, **{"npu-smi info": ran("npu_smi_910_93_healthy.txt")}))
    assert verdicts(report) == [(i, "ok", []) for i in range(16)] and report.reason() == "devices ok: NPU 0-15"


@pytest.mark.parametrize(
    "over, expected, reason",
    [
        (
            {"npu-smi info": ran("npu_smi_910b_occupied_container.txt")},
            only(0, "faulty", [("process", "faulty", "held by pid 351533 (no process name, 51409 MB)")]),
            "NPU 0: held by pid 351533 (no process name, 51409 MB) (npu-smi info)",
        ),
        (
            {"npu-smi info": ran("npu_smi_910b_health_warning.txt")},
            only(3, "faulty", [("health", "faulty", "Health Warning")]),
            "NPU 3: Health Warning (npu-smi info)",
        ),
        (
            {"hccn_tool_-i_3_-link": ran("hccn_link_down.txt")},
            only(3, "faulty", [("link", "faulty", "link status: DOWN")]),
            "NPU 3: link status: DOWN (hccn_tool -link -g)",
        ),
        (
            {"hccn_tool_-i_3_-link": ran("hccn_link_partial.txt")},
            only(3, "faulty", [("link", "faulty", "link status: PARTIAL LINK")]),
            "NPU 3: link status: PARTIAL LINK (hccn_tool -link -g)",
        ),
        (
            {"hccn_tool_-i_1_-net_health": ran("hccn_net_health_receive_timeout.txt")},
            only(1, "faulty", [("net_health", "faulty", "net health status: Receive timeout")]),
            "NPU 1: net health status: Receive timeout (hccn_tool -net_health -g)",
        ),
        (
            {"hccn_tool_-i_0_-ip": ran("ipaddr:192.98.0.250\nnetmask:255.255.255.0\n")},
            only(0, "faulty", [("ip", "faulty", "ipaddr:192.98.0.250, the job uses 192.98.0.1")]),
            "NPU 0: ipaddr:192.98.0.250, the job uses 192.98.0.1 (hccn_tool -ip -g)",
        ),
        (
            {"hccn_tool_-i_0_-ip": ran("hccn_ip_not_preset.txt", 1)},
            only(
                0,
                "faulty",
                [("ip", "faulty", "Get ipconf failed, because no ip was preset there! (the job uses 192.98.0.1)")],
            ),
            "NPU 0: Get ipconf failed, because no ip was preset there! (the job uses 192.98.0.1) (hccn_tool -ip -g)",
        ),
        (
            {"hccn_tool_-i_7_-link": ran("hccn_device_not_exist.txt", 1)},
            only(7, "faulty", [("link", "faulty", "The device is not exist!")]),
            "NPU 7: The device is not exist! (hccn_tool -link -g)",
        ),
        (
            {"hccn_tool_-i_2_-net_health": ran("hccn_link_is_down.txt", 1)},
            only(2, "faulty", [("net_health", "faulty", "Execute failed: Link status is down.")]),
            "NPU 2: Execute failed: Link status is down. (hccn_tool -net_health -g)",
        ),
    ],
)
def test_one_faulty_device(over, expected, reason):
    report = judge_host("ascend", H1, ascend(**over))
    assert verdicts(report) == expected
    assert report.status == "faulty" and report.reason() == reason


def test_init_net_health_and_a_spaced_link_line_pass():
    over = {f"hccn_tool_-i_{n}_-net_health": ran("hccn_net_health_init.txt") for n in range(8)}
    over.update({f"hccn_tool_-i_{n}_-link": ran("hccn_link_up_spaced.txt") for n in range(8)})
    assert judge_host("ascend", H1, ascend(**over)).status == "ok"


@pytest.mark.parametrize(
    "over, expected, reason",
    [
        (
            {"npu-smi info": Outcome("not_found")},
            [
                (
                    i,
                    "not_checked",
                    [
                        (
                            c,
                            "not_checked",
                            "npu-smi not found on h1 (looked for /usr/local/bin/npu-smi, npu-smi on PATH)",
                        )
                        for c in ("health", "process")
                    ],
                )
                for i in range(8)
            ],
            "devices not checked: NPU 0-7: npu-smi not found on h1 (looked for /usr/local/bin/npu-smi, npu-smi on "
            "PATH)",
        ),
        (
            {"npu-smi info": ran("", 127, "sh: 1: npu-smi: not found\n")},
            [
                (
                    i,
                    "not_checked",
                    [
                        (
                            c,
                            "not_checked",
                            "npu-smi not found on h1 (npu-smi info exited with 127: sh: 1: npu-smi: not found)",
                        )
                        for c in ("health", "process")
                    ],
                )
                for i in range(8)
            ],
            "devices not checked: NPU 0-7: npu-smi not found on h1 (npu-smi info exited with 127: sh: 1: npu-smi: not "
            "found)",
        ),
        (
            {"hccn_tool_-i_3_-link": Outcome("timed_out", seconds=8.0)},
            only(3, "not_checked", [("link", "not_checked", "hccn_tool -i 3 -link -g timed out after 8 s on h1")]),
            "devices not checked: NPU 3: hccn_tool -link -g timed out after 8 s on h1",
        ),
        (
            {"hccn_tool_-i_3_-net_health": ran("hccn_busy.txt", 1)},
            only(3, "not_checked", [("net_health", "not_checked", "hccn_tool is busy, please try again.")]),
            "devices not checked: NPU 3: hccn_tool is busy, please try again. (hccn_tool -net_health -g)",
        ),
        (
            {"hccn_tool_-i_4_-tls": Outcome("skipped", detail="an earlier hccn_tool command timed out")},
            only(
                4,
                "not_checked",
                [
                    (
                        "tls",
                        "not_checked",
                        "hccn_tool -i 4 -tls -g not run on h1: an earlier hccn_tool command timed out",
                    )
                ],
            ),
            "devices not checked: NPU 4: hccn_tool -tls -g not run on h1: an earlier hccn_tool command timed out",
        ),
        (
            {"hccn_tool_-i_5_-link": Outcome("error", detail="PermissionError: [Errno 13] Permission denied")},
            only(
                5,
                "not_checked",
                [
                    (
                        "link",
                        "not_checked",
                        "hccn_tool -i 5 -link -g could not run on h1: PermissionError: [Errno 13] Permission denied",
                    )
                ],
            ),
            "devices not checked: NPU 5: hccn_tool -link -g could not run on h1: PermissionError: [Errno 13] "
            "Permission denied",
        ),
        (
            {"hccn_tool_-i_6_-link": ran("link status: UP\n", 3)},
            only(6, "not_checked", [("link", "not_checked", "hccn_tool -i 6 -link -g exited with 3: link status: UP")]),
            "devices not checked: NPU 6: hccn_tool -link -g exited with 3: link status: UP",
        ),
        (
            {"npu-smi info": ran("npu_smi_910b_healthy.txt", 255, "dcmi module initialize failed. ret is -8005\n")},
            [
                (
                    i,
                    "not_checked",
                    [
                        (
                            c,
                            "not_checked",
                            "npu-smi info exited with 255 on h1: dcmi module initialize failed. ret is -8005",
                        )
                        for c in ("health", "process")
                    ],
                )
                for i in range(8)
            ],
            "devices not checked: NPU 0-7: npu-smi info exited with 255 on h1: dcmi module initialize failed. ret is "
            "-8005",
        ),
    ],
)
def test_checks_that_could_not_run_are_named_and_are_not_faults(over, expected, reason):
    outcomes = ascend(**over)
    report = judge_host("ascend", H1, outcomes)
    assert verdicts(report) == expected
    assert report.status == "not_checked" and report.reason() == reason
    assert not report.failed("try") and report.failed("require") and not report.failed("off")


def test_a_device_npu_smi_does_not_list():
    spec = HostDeviceSpec("h1", (1, 9), 2)
    report = judge_host("ascend", spec, ascend(spec), roce=False)
    assert verdicts(report) == [
        (1, "ok", []),
        (9, "faulty", [("health", "faulty", "not listed by npu-smi info (it lists 0-7)")]),
    ]
    assert report.reason() == "NPU 9: not listed by npu-smi info (it lists 0-7)"
    assert report.note == "device NICs (hccn_tool) not checked"


def test_a_process_table_without_an_npu_was_cut_short():
    text = fixture("npu_smi_910b_healthy.txt").replace(
        "| No running processes found in NPU 2                                                            |\n"
        "+===========================+===============+====================================================+\n",
        "",
    )
    spec = HostDeviceSpec("h1", (1,), 1)
    report = judge_host("ascend", spec, ascend(spec, **{"npu-smi info": ran(text)}), roce=False)
    why = (
        "npu-smi info's process table does not mention NPU 2 (a free NPU has a 'No running processes found' row): "
        "its output ends early (on h1)"
    )
    assert verdicts(report) == [(1, "not_checked", [("health", "not_checked", why), ("process", "not_checked", why)])]


def test_no_planned_ip_compares_nothing_but_a_missing_ip_is_still_faulty():
    spec = HostDeviceSpec("h1", (0, 1), 2)
    report = judge_host("ascend", spec, ascend(spec, **{"hccn_tool_-i_1_-ip": ran("hccn_ip_not_preset.txt", 1)}))
    assert verdicts(report) == [
        (0, "ok", []),
        (1, "faulty", [("ip", "faulty", "Get ipconf failed, because no ip was preset there!")]),
    ]
    assert report.devices[0].checks[4].evidence == "ipaddr:192.98.0.1 (no device IP planned to compare)"


def test_many_findings_are_counted_in_the_line():
    over = {f"hccn_tool_-i_{n}_-ip": ran(f"ipaddr:10.0.0.{n}\nnetmask:255.255.255.0\n") for n in range(8)}
    reason = judge_host("ascend", H1, ascend(**over)).reason()
    assert reason == (
        "NPU 0: ipaddr:10.0.0.0, the job uses 192.98.0.1 (hccn_tool -ip -g); "
        "NPU 1: ipaddr:10.0.0.1, the job uses 192.98.1.1 (hccn_tool -ip -g); "
        "NPU 2: ipaddr:10.0.0.2, the job uses 192.98.2.1 (hccn_tool -ip -g); "
        "NPU 3: ipaddr:10.0.0.3, the job uses 192.98.3.1 (hccn_tool -ip -g); and 4 more finding(s)"
    )


def _tls_hosts(values: List[str]) -> List[HostDevices]:
    specs = [HostDeviceSpec(f"h{k + 1}", (0, 1), 2) for k in range(len(values))]
    answers = {}
    for spec, v in zip(specs, values):
        name = "hccn_tls_enabled.txt" if v == "1" else "hccn_tls_disabled.txt"
        answers[spec.host] = ascend(spec, **{f"hccn_tool_-i_{n}_-tls": ran(name) for n in (0, 1)})
    return judge_hosts("ascend", specs, answers)


def test_tls_the_same_everywhere_passes():
    assert [r.status for r in _tls_hosts(["1", "1", "1"])] == ["ok", "ok", "ok"]


def test_tls_minority_is_faulty():
    reports = _tls_hosts(["0", "0", "1"])
    assert [r.status for r in reports] == ["ok", "ok", "faulty"]
    assert reports[2].reason() == (
        "NPU 0-1: tls switch[1], 4 of 6 devices have tls switch[0] (0 on h1, h2 vs 1 on h3) (hccn_tool -tls -g)"
    )


def test_tls_without_a_majority_every_device_is_faulty():
    reports = _tls_hosts(["0", "1"])
    assert [r.status for r in reports] == ["faulty", "faulty"]
    assert reports[0].reason() == "NPU 0-1: tls switch[0]; the devices differ: 0 on h1 vs 1 on h2 (hccn_tool -tls -g)"


def test_a_host_that_did_not_answer():
    specs = [HostDeviceSpec("h1", (0,), 1), HostDeviceSpec("h2", (0, 1), 2)]
    reports = judge_hosts("gpu", specs, {}, {"h2": "ssh: connection refused by h2:22"})
    assert [verdicts(r) for r in reports] == [
        [
            (
                0,
                "not_checked",
                [
                    ("health", "not_checked", "nvidia-smi --query-gpu: no answer from the probe on h1"),
                    ("process", "not_checked", "nvidia-smi --query-compute-apps: no answer from the probe on h1"),
                ],
            )
        ],
        [
            (n, "not_checked", [("answer", "not_checked", "h2 did not answer: ssh: connection refused by h2:22")])
            for n in (0, 1)
        ],
    ]


G = HostDeviceSpec("g1", (0, 1, 2, 3), 4)


def gpu(gpus: str = "nvsmi_gpus_healthy.csv", apps: str = "nvsmi_apps_none.csv", code: int = 0) -> Dict[str, Outcome]:
    return {"nvidia-smi --query-gpu": ran(gpus, code), "nvidia-smi --query-compute-apps": ran(apps, code)}


@pytest.mark.parametrize(
    "outcomes, expected, status, reason",
    [
        (gpu(), [(i, "ok", []) for i in range(4)], "ok", "devices ok: GPU 0-3"),
        (
            gpu("nvsmi_gpus_ecc_error.csv"),
            only(
                3,
                "faulty",
                [
                    ("ecc", "faulty", "uncorrected ECC errors (volatile): 2"),
                    ("retired_pages", "faulty", "retired pages pending (reset the GPU): Yes"),
                ],
                4,
            ),
            "faulty",
            "GPU 3: uncorrected ECC errors (volatile): 2; retired pages pending (reset the GPU): Yes (nvidia-smi "
            "--query-gpu)",
        ),
        (
            gpu("nvsmi_gpus_remapped_pending.csv"),
            only(1, "faulty", [("remapped_rows", "faulty", "remapped rows pending (reset the GPU): Yes")], 4),
            "faulty",
            "GPU 1: remapped rows pending (reset the GPU): Yes (nvidia-smi --query-gpu)",
        ),
        (
            gpu(apps="nvsmi_apps_occupied.csv"),
            only(2, "faulty", [("process", "faulty", "held by pid 30496 (python3, 61440 MiB)")], 4),
            "faulty",
            "GPU 2: held by pid 30496 (python3, 61440 MiB) (nvidia-smi --query-compute-apps)",
        ),
        (
            gpu("nvsmi_driver_failed.txt", "nvsmi_driver_failed.txt", 9),
            [
                (
                    i,
                    "faulty",
                    [
                        (
                            c,
                            "faulty",
                            f"nvidia-smi --query-{q} exited with 9 (NVIDIA driver is not loaded) on g1: "
                            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure "
                            "that the ...",
                        )
                        for c, q in (("health", "gpu"), ("process", "compute-apps"))
                    ],
                )
                for i in range(4)
            ],
            "faulty",
            "GPU 0-3: nvidia-smi --query-gpu exited with 9 (NVIDIA driver is not loaded) on g1: NVIDIA-SMI has failed "
            "because "
            "it couldn't communicate with the NVIDIA driver. Make sure that the ...; nvidia-smi --query-compute-apps "
            "exited with 9 "
            "(NVIDIA driver is not loaded) on g1: NVIDIA-SMI has failed because it couldn't communicate with the "
            "NVIDIA driver. "
            "Make sure that the ...",
        ),
        (
            {"nvidia-smi --query-gpu": Outcome("not_found"), "nvidia-smi --query-compute-apps": Outcome("not_found")},
            [
                (
                    i,
                    "not_checked",
                    [
                        (c, "not_checked", "nvidia-smi not found on g1 (looked for nvidia-smi on PATH)")
                        for c in ("health", "process")
                    ],
                )
                for i in range(4)
            ],
            "not_checked",
            "devices not checked: GPU 0-3: nvidia-smi not found on g1 (looked for nvidia-smi on PATH)",
        ),
        (
            gpu("Insufficient Permissions\n", "nvsmi_apps_none.csv", 4),
            [
                (
                    i,
                    "not_checked",
                    [
                        (
                            c,
                            "not_checked",
                            f"nvidia-smi --query-{q} exited with 4 (the current user does not have permission to "
                            f"access this device or perform this operation) on g1: {w}",
                        )
                        for c, q, w in (
                            ("health", "gpu", "Insufficient Permissions"),
                            ("process", "compute-apps", "(no output)"),
                        )
                    ],
                )
                for i in range(4)
            ],
            "not_checked",
            None,
        ),
    ],
)
def test_gpu_verdicts(outcomes, expected, status, reason):
    report = judge_host("gpu", G, outcomes)
    assert verdicts(report) == expected and report.status == status
    if reason is not None:
        assert report.reason() == reason


def test_unsupported_fields_are_not_faults():
    spec = HostDeviceSpec("g1", (0, 1), 2)
    report = judge_host("gpu", spec, gpu("nvsmi_gpus_na.csv"))
    assert verdicts(report) == [(0, "ok", []), (1, "ok", [])]
    assert [(c.check, c.evidence) for c in report.devices[1].checks] == [
        ("ecc", "not supported"),
        ("retired_pages", "not supported"),
        ("remapped_rows", "not supported"),
        ("process", "no compute process"),
    ]


def test_fewer_gpus_than_ranks_is_faulty():
    spec = HostDeviceSpec("g1", (0, 1), 4)  # 4 ranks on 2 GPUs (ranks share a device id)
    report = judge_host("gpu", spec, gpu("nvsmi_gpus_na.csv"))
    assert [(c.check, c.status, c.evidence) for c in report.host_checks] == [
        ("count", "faulty", "2 GPU(s) for 4 rank(s): nvidia-smi lists 0-1")
    ]
    assert (
        report.status == "faulty"
        and report.reason() == "2 GPU(s) for 4 rank(s): nvidia-smi lists 0-1 (nvidia-smi --query-gpu)"
    )


def test_cpu_and_hosts_without_devices():
    assert device_commands("cpu", H1) == () and device_commands("gpu", HostDeviceSpec("h", (), 0)) == ()
    cpu = judge_host("cpu", H1, {})
    assert (cpu.status, cpu.reason(), cpu.failed("require")) == ("ok", "devices not checked: device target cpu", False)
    none = judge_host("ascend", HostDeviceSpec("h", (), 0), {})
    assert (none.status, none.reason(), none.failed("try")) == (
        "not_checked",
        "devices not checked: no device planned on this host",
        False,
    )


def test_commands_whole():
    spec = HostDeviceSpec("h", (3,), 1)
    cmds = device_commands("ascend", spec)
    assert [(c.key, c.tool, c.candidates, c.argv, c.timeout, c.check, c.device) for c in cmds] == [
        ("npu-smi info", "npu-smi", ("/usr/local/bin/npu-smi", "npu-smi"), ("info",), 15.0, "info", None)
    ] + [
        (
            f"hccn_tool -i 3 {opt} -g",
            "hccn_tool",
            ("/usr/local/Ascend/driver/tools/hccn_tool", "hccn_tool"),
            ("-i", "3", opt, "-g"),
            8.0,
            check,
            3,
        )
        for check, opt in (("link", "-link"), ("net_health", "-net_health"), ("ip", "-ip"), ("tls", "-tls"))
    ]
    assert [c.key for c in device_commands("ascend", H1, roce=False)] == ["npu-smi info"]
    gcmds = device_commands("gpu", spec, ToolSetup(nvidia_smi=("/opt/fake/nvidia-smi",), nvidia_timeout=3.0))
    assert [(c.key, c.candidates, c.argv, c.timeout) for c in gcmds] == [
        (
            "nvidia-smi --query-gpu",
            ("/opt/fake/nvidia-smi",),
            (
                "--query-gpu=index,uuid,ecc.errors.uncorrected.volatile.total,retired_pages.pending,remapped_rows.pending",
                "--format=csv,noheader,nounits",
            ),
            3.0,
        ),
        (
            "nvidia-smi --query-compute-apps",
            ("/opt/fake/nvidia-smi",),
            ("--query-compute-apps=gpu_uuid,pid,process_name,used_memory", "--format=csv,noheader,nounits"),
            3.0,
        ),
    ]
    with pytest.raises(PlanError, match="unknown device target 'npu'"):
        device_commands("npu", spec)


def test_probe_order_and_time_limit():
    order = probe_order("ascend", HostDeviceSpec("h", (0, 1), 2))
    assert (order["op"], len(order["commands"]), order["limit"], order["output_limit"]) == (
        "devices",
        9,
        60.0,
        65536,
    )  # 8 x 8 s, capped
    assert order["commands"][1] == {
        "key": "hccn_tool -i 0 -link -g",
        "tool": "hccn_tool",
        "candidates": ["/usr/local/Ascend/driver/tools/hccn_tool", "hccn_tool"],
        "argv": ["-i", "0", "-link", "-g"],
        "timeout": 8.0,
    }
    assert host_time_limit(device_commands("ascend", HostDeviceSpec("h", (0,), 1))) == 32.0
    assert host_time_limit(device_commands("gpu", G)) == 30.0 and host_time_limit(()) == 0.0


def test_outcomes_from_json_never_raises():
    answer = {
        "outcomes": [
            {"key": "a", "status": "exited", "exit_code": 0, "stdout": "x", "stderr": "", "seconds": 0.5},
            {"key": "b", "status": "timed_out", "seconds": 8},
            {"key": "c", "status": "exited"},
            {"key": "d", "status": "bogus"},
            {"status": "exited", "exit_code": 0},
            "junk",
        ]
    }
    got = outcomes_from_json(answer)
    assert got == {
        "a": Outcome("exited", 0, "x", "", 0.5),
        "b": Outcome("timed_out", None, "", "", 8.0),
        "c": Outcome("error", detail="the probe's answer has no exit code: None"),
        "d": Outcome("error", detail="the probe's answer has no known status: 'bogus'"),
    }
    assert outcomes_from_json(None) == {} and outcomes_from_json({"outcomes": 3}) == {}


@pytest.mark.parametrize(
    "status, policy, failed",
    [
        (s, p, f)
        for s, row in (
            ("ok", (False, False, False)),
            ("not_checked", (False, False, True)),
            ("faulty", (False, True, True)),
        )
        for p, f in zip(("off", "try", "require"), row)
    ],
)
def test_policies(status, policy, failed):
    outcomes = {
        "ok": ascend(),
        "not_checked": ascend(**{"npu-smi info": Outcome("not_found")}),
        "faulty": ascend(**{"hccn_tool_-i_0_-link": ran("hccn_link_down.txt")}),
    }
    report = judge_host("ascend", H1, outcomes[status])
    assert report.status == status and report.failed(policy) is failed


def test_check_policy():
    assert check_policy(" Require ") == "require"
    with pytest.raises(PlanError) as err:
        check_policy("strict")
    assert str(err.value) == "--device-checks: unknown --device-checks 'strict'; use one of off, try, require"


OK = Verdict("h1", "ok", "ok: compute 7.50 GFLOPS, network 240.6 MB/s", 7.5, 240.6)


def test_with_devices_joins_the_health_verdict():
    faulty = judge_host("ascend", H1, ascend(**{"hccn_tool_-i_3_-link": ran("hccn_link_down.txt")}))
    v = with_devices(OK, faulty)
    assert (v.status, v.line()) == (
        "faulty",
        "h1 faulty: NPU 3: link status: DOWN (hccn_tool -link -g); compute 7.50 GFLOPS, network 240.6 MB/s",
    )
    ok = with_devices(OK, judge_host("ascend", H1, ascend()))
    assert (ok.status, ok.reason) == ("ok", "ok: compute 7.50 GFLOPS, network 240.6 MB/s; devices ok: NPU 0-7")
    missing = judge_host("ascend", H1, ascend(**{"npu-smi info": Outcome("not_found")}))
    assert with_devices(OK, missing).status == "ok"
    req = with_devices(OK, missing, "require")
    assert (req.status, req.reason) == (
        "faulty",
        "faulty: devices not checked: NPU 0-7: npu-smi not found on h1 (looked for "
        "/usr/local/bin/npu-smi, npu-smi on PATH); compute 7.50 GFLOPS, network 240.6 MB/s",
    )
    slow = Verdict("h1", "slow", "slow: compute 0.90 GFLOPS, median 7.45; threshold 0.5", 0.9)
    assert with_devices(slow, faulty).reason == (
        "faulty: NPU 3: link status: DOWN (hccn_tool -link -g); slow: compute 0.90 GFLOPS, median 7.45; threshold 0.5"
    )
    down = Verdict("h1", "faulty", "faulty: ssh: connection refused by h1:22")
    gone = judge_hosts("ascend", [H1], {}, {"h1": "ssh: connection refused by h1:22"})[0]
    assert with_devices(down, gone).reason == "faulty: ssh: connection refused by h1:22"
    assert with_devices(OK, faulty, "off") is OK and with_devices(OK, None) is OK


def test_health_json_carries_the_devices():
    report = judge_host("gpu", G, gpu(apps="nvsmi_apps_occupied.csv"))
    data = json.loads(
        json.dumps(
            health_json(
                [with_devices(OK, report)],
                kernel="numpy",
                threshold=0.5,
                seconds=1.0,
                devices={"target": "gpu", "source": "DEVICE_TARGET", "checks": "try", "note": None},
            )
        )
    )
    host = data["hosts"][0]
    assert data["ok"] is False and data["devices"] == {
        "target": "gpu",
        "source": "DEVICE_TARGET",
        "checks": "try",
        "note": None,
    }
    assert host["verdict"] == "faulty" and set(host["devices"]) == {
        "target",
        "verdict",
        "reason",
        "devices",
        "host_checks",
    }
    assert host["devices"]["devices"][2] == {
        "device": 2,
        "verdict": "faulty",
        "checks": [
            {"check": c, "verdict": "ok", "evidence": e, "command": "nvidia-smi --query-gpu"}
            for c, e in (("ecc", "0"), ("retired_pages", "No"), ("remapped_rows", "No"))
        ]
        + [
            {
                "check": "process",
                "verdict": "faulty",
                "evidence": "held by pid 30496 (python3, 61440 MiB)",
                "command": "nvidia-smi --query-compute-apps",
            }
        ],
    }
    assert host["devices"]["host_checks"] == [
        {
            "check": "count",
            "verdict": "ok",
            "evidence": "8 GPU(s) for 4 rank(s): nvidia-smi lists 0-7",
            "command": "nvidia-smi --query-gpu",
        }
    ]
    assert "devices" not in health_json([OK], kernel="numpy", threshold=0.5, seconds=1.0)["hosts"][0]
