"""The scheduler-only program (MindSpore end to end: ``tests/integration/test_msrun_e2e.py``)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.e2e
def test_outside_the_scheduler_role_it_refuses_in_one_line():
    env = {k: v for k, v in os.environ.items() if k != "MS_ROLE"}
    r = subprocess.run(
        [sys.executable, "-m", "launcher.workloads.scheduler"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=60,
    )
    assert r.returncode == 2 and r.stdout == ""
    assert (
        r.stderr
        == "scheduler: error: MS_ROLE is not MS_SCHED; a launcher starts this as the dynamic cluster's scheduler\n"
    )
