"""What each test costs in CPU, every process it started included: ``pytest -p tests.harness.cpuprof``.

``make test`` is bound by the CPU of its two cores, not by waits: its wall time is about the CPU
seconds of all its tests over the cores, so a test's cost is its CPU seconds, and a test's own
process sees only part of them (its children's ranks, the sshd and ranks of a namespace host it
started, Slurm's daemons).  Each pytest-xdist worker moves itself into a cgroup v1 ``cpuacct``
group of its own, which every process it starts from then on inherits (namespace hosts included:
their daemons are started by the worker); a test's CPU is the group's usage over its setup, call
and teardown.  One JSON line per test, ``{"id", "cpu", "wall"}``, is appended to the file
``MSLAUNCH_TEST_CPU`` names (default ``test-cpu.jsonl``); without root or the controller, or
outside a pytest-xdist worker (the group must not hold pytest's controller), nothing is measured.

    MSLAUNCH_TEST_CPU=/tmp/cpu.jsonl .venv/bin/python -m pytest -p tests.harness.cpuprof -n 2 tests/integration
    python -m tests.harness.cpuprof /tmp/cpu.jsonl     # the 25 costliest, and the total
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Optional

import pytest

ROOT = "/sys/fs/cgroup/cpuacct"
OUT_VAR = "MSLAUNCH_TEST_CPU"

_group: Optional[str] = None


def _usage() -> float:
    assert _group is not None
    with open(os.path.join(_group, "cpuacct.usage")) as f:
        return int(f.read()) / 1e9


def pytest_configure(config: Any) -> None:
    global _group
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker or not os.access(ROOT, os.W_OK):
        return
    group = os.path.join(ROOT, "mslaunch-tests", f"{worker}-{os.getpid()}")
    os.makedirs(group, exist_ok=True)
    with open(os.path.join(group, "cgroup.procs"), "w") as f:
        f.write(str(os.getpid()))
    _group = group


def pytest_unconfigure(config: Any) -> None:
    """Back to the root group, and the worker's group removed (its children ended with the tests)."""
    global _group
    if _group is None:
        return
    with open(os.path.join(ROOT, "cgroup.procs"), "w") as f:
        f.write(str(os.getpid()))
    try:
        os.rmdir(_group)
    except OSError:  # a process left in it (the suite's leak checks name those)
        pass
    _group = None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: Any, nextitem: Any) -> Any:
    if _group is None:
        yield
        return
    cpu, wall = _usage(), time.monotonic()
    yield
    row = {"id": item.nodeid, "cpu": round(_usage() - cpu, 2), "wall": round(time.monotonic() - wall, 2)}
    with open(os.environ.get(OUT_VAR, "test-cpu.jsonl"), "a", encoding="utf-8") as f:
        f.write(json.dumps(row) + "\n")


def main(path: str, top: int = 25) -> None:
    with open(path, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    for r in sorted(rows, key=lambda r: -r["cpu"])[:top]:
        print(f"{r['cpu']:7.2f} CPU-s {r['wall']:7.2f} s  {r['id']}")
    print(f"{len(rows)} tests: {sum(r['cpu'] for r in rows):.1f} CPU-s")


if __name__ == "__main__":
    main(sys.argv[1])
