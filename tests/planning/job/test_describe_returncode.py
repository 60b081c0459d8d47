"""One wording of an exit status (launcher.planning.job.kinds.describe_returncode), used by results,
the supervisor and the console."""

from __future__ import annotations

import signal

import pytest

from launcher.execution.results import ProcResult
from launcher.planning.job.kinds import describe_returncode, signal_name


@pytest.mark.parametrize(
    "rc, text",
    [
        (0, "exit code 0"),
        (1, "exit code 1"),
        (137, "exit code 137"),
        (255, "exit code 255"),
        (-9, "killed by SIGKILL"),
        (-15, "killed by SIGTERM"),
        (-2, "killed by SIGINT"),
        (-11, "killed by SIGSEGV"),
        (-6, "killed by SIGABRT"),
    ],
)
def test_describe_returncode(rc, text):
    assert describe_returncode(rc) == text


def test_signal_without_a_name():
    unnamed = next(n for n in range(1, 200) if n not in {s.value for s in signal.Signals})
    assert signal_name(unnamed) == f"SIG{unnamed}"
    assert describe_returncode(-unnamed) == f"killed by SIG{unnamed}"


@pytest.mark.parametrize("rc", [0, 2, -9, -15])
def test_process_results_use_the_one_wording(rc):
    proc = ProcResult(name="rank 0", rank=0, host="localhost", returncode=rc, started=0.0, ended=1.0, log="/l")
    if rc == 0:
        assert not proc.failed
    assert proc.describe() == describe_returncode(rc)
