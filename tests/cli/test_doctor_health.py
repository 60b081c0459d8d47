"""``doctor --health`` on this machine's hosts, and its bad input: one line, exit 2."""
from __future__ import annotations

import json
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


@pytest.mark.parametrize("args, needle", [
    (("--health-kernel", "bogus", "-H", "localhost"), "unknown --health-kernel 'bogus'; use one of numpy, mindspore"),
    (("--health-threshold", "2", "-H", "localhost"), "--health-threshold must be between 0 and 1"),
    ((), "pass --hosts FILE or -H LIST"),
])
def test_bad_input_is_one_line(tmp_path, args, needle) -> None:
    r = _doctor(tmp_path, *args)
    assert r.returncode == 2 and needle in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
