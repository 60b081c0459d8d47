"""The probe's device step (:mod:`launcher.execution.probes.device_runner`) on real tiny
processes: where the tools are found, what a run, a timeout, a missing tool and the host's limit
answer, one tool's commands in order and different tools at once, and nothing left behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import psutil
import pytest

from launcher.execution.checks.health import probe_source
from launcher.execution.probes.device_runner import resolve, run_order
from launcher.planning.health.devices import ToolSetup, outcomes_from_json, probe_order
from launcher.planning.health.devices.model import HostDeviceSpec
from tests.harness.paths import TESTS


def _tool(folder, name: str, body: str) -> str:
    path = folder / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    os.chmod(path, 0o755)
    return str(path)


def _cmd(key: str, tool: str, exe: str, *argv: str, timeout: float = 10.0) -> dict:
    return {"key": key, "tool": tool, "candidates": [exe], "argv": list(argv), "timeout": timeout}


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_resolve_takes_an_existing_absolute_path_then_a_name_on_path(tmp_path) -> None:
    exe = _tool(tmp_path, "npu-smi", "true")
    (tmp_path / "plain").write_text("not executable")
    assert resolve([str(tmp_path / "missing"), exe, "npu-smi"]) == exe
    assert resolve([str(tmp_path / "plain"), "npu-smi"], path=str(tmp_path)) == exe
    assert resolve([str(tmp_path / "missing"), "npu-smi"], path=str(tmp_path / "nowhere")) is None
    assert resolve(["sub/npu-smi"], path=str(tmp_path)) is None  # a relative path is neither


def test_outcomes_of_a_run_a_missing_tool_a_failure_to_start_and_cut_output(tmp_path) -> None:
    ok = _tool(tmp_path, "ok", 'echo "args: $*"; printf "caf\\303\\251 \\377\\n"; echo err >&2; exit 3')
    big = _tool(tmp_path, "big", "head -c 5000 /dev/zero | tr '\\0' x")
    broken = _tool(tmp_path, "broken", "")
    (tmp_path / "broken").write_text("#!/nonexistent/interpreter\n")
    order = {
        "op": "devices",
        "limit": 30,
        "output_limit": 100,
        "commands": [
            _cmd("ok -i 1", "ok", ok, "-i", "1"),
            _cmd("gone", "gone", str(tmp_path / "gone")),
            _cmd("broken", "broken", broken),
            _cmd("big", "big", big),
        ],
    }
    out = run_order(order)["outcomes"]
    assert [o["key"] for o in out] == ["ok -i 1", "gone", "broken", "big"]
    first = dict(out[0])
    assert first.pop("seconds") >= 0
    assert first == {
        "key": "ok -i 1",
        "status": "exited",
        "exit_code": 3,
        "stdout": "args: -i 1\ncafé \ufffd\n",
        "stderr": "err\n",
    }
    assert out[1] == {"key": "gone", "status": "not_found"}
    assert out[2]["status"] == "error" and out[2]["detail"].startswith(broken + ": ")
    assert out[3]["stdout"] == "x" * 100
    parsed = outcomes_from_json({"outcomes": out})
    assert parsed["ok -i 1"].exit_code == 3 and parsed["gone"].status == "not_found"


def test_a_hanging_tool_is_killed_with_its_group_and_its_next_commands_skipped(tmp_path) -> None:
    pidfile = tmp_path / "grandchild.pid"
    hang = _tool(tmp_path, "hccn_tool", f"sleep 60 & echo $! > {pidfile}; wait")
    other = _tool(tmp_path, "npu-smi", "echo fine")
    order = {
        "op": "devices",
        "limit": 30,
        "output_limit": 1000,
        "commands": [
            _cmd("hccn -link", "hccn_tool", hang, timeout=0.5),
            _cmd("hccn -ip", "hccn_tool", hang, timeout=0.5),
            _cmd("npu-smi info", "npu-smi", other),
        ],
    }
    out = run_order(order)["outcomes"]
    assert out[0] == {"key": "hccn -link", "status": "timed_out", "seconds": 0.5}
    assert out[1] == {"key": "hccn -ip", "status": "skipped", "detail": "hccn -link timed out before it"}
    assert out[2]["status"] == "exited" and out[2]["stdout"] == "fine\n"
    assert not _alive(int(pidfile.read_text()))  # the tool's background child went with it


def test_one_tool_runs_in_order_and_different_tools_at_once(tmp_path) -> None:
    # b waits for a's file: it can finish only while a's tool runs beside it, and a's second
    # command sees what its first one wrote
    mark, seen = tmp_path / "a-started", tmp_path / "order"
    a = _tool(
        tmp_path,
        "a",
        f'echo "$1" >> {seen}; touch {mark}; [ "$1" = first ] && while [ ! -e {tmp_path}/b-done ]; do sleep 0.01; '
        f"done; cat {seen}",
    )
    b = _tool(tmp_path, "b", f"while [ ! -e {mark} ]; do sleep 0.01; done; touch {tmp_path}/b-done; echo b")
    order = {
        "op": "devices",
        "limit": 20,
        "output_limit": 1000,
        "commands": [
            _cmd("a1", "a", a, "first", timeout=10),
            _cmd("a2", "a", a, "second", timeout=10),
            _cmd("b", "b", b, timeout=10),
        ],
    }
    out = {o["key"]: o for o in run_order(order)["outcomes"]}
    assert [out[k]["status"] for k in ("a1", "a2", "b")] == ["exited"] * 3, out
    assert out["a2"]["stdout"] == "first\nsecond\n" and out["b"]["stdout"] == "b\n"


def test_past_the_hosts_limit_nothing_more_starts_and_the_running_command_ends_there(tmp_path) -> None:
    slow = _tool(tmp_path, "slow", "sleep 30")
    quick = _tool(tmp_path, "quick", "echo q")
    order = {
        "op": "devices",
        "limit": 0.6,
        "output_limit": 1000,
        "commands": [
            _cmd("s1", "slow", slow, timeout=10),
            _cmd("s2", "slow", slow, timeout=10),
            _cmd("q", "quick", quick),
        ],
    }
    t0 = time.monotonic()
    out = run_order(order)["outcomes"]
    assert time.monotonic() - t0 < 5
    assert out[0]["key"] == "s1" and out[0]["status"] == "timed_out" and out[0]["seconds"] <= 0.6
    assert out[1]["status"] == "skipped"
    assert out[2]["status"] == "exited"


@pytest.mark.parametrize("bad", [{"commands": "x"}, {"commands": [{"no": "key"}, 3]}, {}])
def test_an_order_without_commands_answers_no_outcome(bad) -> None:
    assert run_order(bad) == {"outcomes": []}


@pytest.mark.e2e
def test_the_probe_sent_to_a_host_runs_an_order_of_the_planner_without_launcher(tmp_path) -> None:
    """The health probe's source alone (no ``launcher`` importable, as on a host) answers a
    ``devices`` order built by :func:`probe_order`."""
    fake = os.path.join(TESTS, "scripts", "fake_devices")
    cfg = tmp_path / "fake"
    (cfg / "hosts").mkdir(parents=True)
    (cfg / "hosts" / "default").write_text("gpu_occupied\n")
    setup = ToolSetup(nvidia_smi=(os.path.join(fake, "nvidia-smi"),))
    order = probe_order("gpu", HostDeviceSpec("h1", (0, 1), 2), setup)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["MSLAUNCH_FAKE_DEVICES_DIR"] = str(cfg)
    proc = subprocess.run(
        [sys.executable, "-S", "-c", probe_source(), json.dumps({"lifetime": 30})],
        input=json.dumps(order) + "\n" + json.dumps({"op": "quit"}) + "\n",
        capture_output=True,
        text=True,
        env=env,
        cwd=str(tmp_path),
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    answer = json.loads(proc.stdout)
    assert [(o["key"], o["status"], o["exit_code"]) for o in answer["outcomes"]] == [
        (c["key"], "exited", 0) for c in order["commands"]
    ]
    with open(
        os.path.join(fake, "..", "..", "planning", "data", "devices", "nvsmi_apps_occupied.csv"), encoding="utf-8"
    ) as f:
        assert answer["outcomes"][1]["stdout"] == f.read()
