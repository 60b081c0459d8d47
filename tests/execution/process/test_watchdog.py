"""The job watchdog's last guard: at the end of mslaunch's own teardown ("exit") it still ends
whatever of the job runs (real processes; only the ones this test started are signalled)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from launcher.execution.process.watchdog import TOKEN_VAR, Watchdog
from tests.harness.faultkit import wait_for


def _sleeper(env):
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], env=env, start_new_session=True)


@pytest.mark.e2e
def test_a_process_of_the_job_left_at_exit_is_ended_and_nothing_else() -> None:
    wd = Watchdog()
    leftover = _sleeper(dict(os.environ, **{TOKEN_VAR: wd.token}))  # the job's, never torn down
    other = _sleeper(dict(os.environ, **{TOKEN_VAR: "another-job"}))  # not the job's
    try:
        assert wait_for(
            lambda: (
                os.path.exists(f"/proc/{leftover.pid}/environ")
                and TOKEN_VAR.encode() in open(f"/proc/{leftover.pid}/environ", "rb").read()
            ),
            10,
        )
        wd.close()
        assert leftover.wait(timeout=10) == -9
        assert other.poll() is None
    finally:
        for p in (leftover, other):
            if p.poll() is None:
                p.kill()
            p.wait()


def test_exit_with_nothing_left_ends_by_itself() -> None:
    wd = Watchdog()
    wd.close()
    assert wd._proc.returncode == 0  # ended by itself, not killed by close()'s bound
