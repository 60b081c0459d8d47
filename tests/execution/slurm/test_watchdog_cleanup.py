"""The watchdog's ``run`` lines: commands it runs if mslaunch dies (the slurm backend's scancel),
and does not run after a clean teardown."""

from __future__ import annotations

import os
import sys

import pytest

from launcher.execution.process.watchdog import Watchdog, on_death


def _writer(path: str) -> list:
    return [sys.executable, "-c", f"open({path!r}, 'w').write('ran')"]


@pytest.mark.e2e
def test_cleanup_runs_when_mslaunch_dies(tmp_path) -> None:
    wd = Watchdog()
    mark = str(tmp_path / "ran")
    on_death(wd, _writer(mark))
    on_death(wd, _writer(mark))  # the same command is kept once
    os.close(wd.fd)  # as if mslaunch died: end of file without "exit"
    wd._proc.wait(timeout=60)
    assert open(mark).read() == "ran"


def test_cleanup_does_not_run_after_a_clean_exit(tmp_path) -> None:
    wd = Watchdog()
    mark = tmp_path / "ran"
    on_death(wd, _writer(str(mark)))
    wd.close()
    assert wd._proc.returncode == 0
    assert not mark.exists()
