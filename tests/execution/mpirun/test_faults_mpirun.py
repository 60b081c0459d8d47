"""Fault tests, mpirun backend, real OpenMPI: SIGKILL of mslaunch ends mpirun, the per-rank
wrappers, ranks, the scheduler and their setsid grandchildren; a rank killed by a signal is
named with its signal; stop signals during start-up give a stopped summary; ranktable files
keep the local backend's modes.
"""

from __future__ import annotations

import os
import signal
import stat

import psutil
import pytest

from tests.harness.ci import require_tool
from tests.harness.faultkit import (
    Fault,
    alive,
    escaper,
    kill_all,
    marked,
    signal_during_startup,
    survivors,
    tree,
    wait_for,
)

pytestmark = pytest.mark.mpi


@pytest.fixture
def fault(tmp_path):
    require_tool("mpirun", package="openmpi-bin")
    f = Fault(tmp_path)
    yield f
    kill_all(marked(f.marker))


MPI = ("--launcher", "mpirun")


def name_of(pid: int) -> str:
    """A process's name, or "" when it ended since the snapshot (mpirun's short-lived helpers do)."""
    try:
        return psutil.Process(pid).name()
    except psutil.NoSuchProcess:
        return ""


def test_sigkill_of_mslaunch_ends_mpirun_wrappers_ranks_scheduler_and_grandchildren(fault):
    proc = fault.popen(*escaper(fault, "hang"), extra=MPI)
    assert wait_for(lambda: len(marked(fault.marker)) >= 9, 60), marked(fault.marker)
    snapshot = tree(proc.pid)
    names = {name_of(pid) for pid in alive(snapshot)}
    assert "mpirun" in names and "mslaunch-rank.s" in names, names  # the test sees what it must end
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert survivors(fault.marker, snapshot) == []


@pytest.mark.parametrize("sig", [signal.SIGSEGV, signal.SIGKILL])
def test_rank_killed_by_signal_is_named_with_rank_and_signal(fault, sig):
    prog = (
        "--no-python",
        "bash",
        "-c",
        f'if [ "$RANK_ID" = 1 ]; then sleep 0.5; kill -{sig.name[3:]} $$; fi; exec sleep 600 # {fault.marker}',
    )
    r = fault.run(*prog, extra=MPI)
    assert r.returncode == 128 + sig, r.stderr
    s = fault.summary()
    cause = s["root_cause"]
    assert (cause["name"], cause["rank"], cause["signal"], cause["exit_code"]) == ("rank 1", 1, sig.name, 128 + sig)
    assert [p["name"] for p in s["processes"] if p["name"] == "mpirun"] == []
    assert survivors(fault.marker, {}) == []


@pytest.mark.parametrize("sig, delays", [(signal.SIGTERM, (0.1, 1.5)), (signal.SIGINT, (0.6,))], ids=["15", "2"])
def test_stop_signal_during_startup(fault, sig, delays):
    """A stop signal 0.1, 0.6 or 1.5 s after mslaunch's handler is installed: a stopped summary,
    128+N, nothing left.  One handler takes every stop signal, so each moment is tried with one of
    the two (tests/execution/local/test_faults_local.py sweeps more moments with both)."""
    for i, delay in enumerate(delays):
        fault.dir = fault.tmp / f"job{i}"
        proc = fault.popen(*escaper(fault, "hang"), extra=MPI)
        snapshot, _, err = signal_during_startup(proc, delay, sig)
        assert proc.returncode == 128 + sig, (delay, err)
        s = fault.summary()
        assert (s["status"], s["exit_code"]) == ("stopped", 128 + sig), delay
        assert survivors(fault.marker, snapshot) == [], delay


def test_ranktable_files_under_mpirun_are_private(fault):
    hccn = fault.tmp / "hccn"
    hccn.mkdir()
    (hccn / "localhost.conf").write_text("address_0=192.1.27.6\naddress_1=192.2.27.6\n")
    r = fault.run("--no-python", "true", extra=MPI + ("--method", "ranktable", "--hccn-dir", str(hccn)))
    assert r.returncode == 0, r.stderr + (fault.dir / "mpirun.log").read_text()
    for rank in (0, 1):
        ddir = fault.dir / f"device{rank}"
        assert stat.S_IMODE(os.stat(ddir).st_mode) == 0o700
        dump = ddir / f"env{rank}.log"
        assert stat.S_IMODE(os.stat(dump).st_mode) == 0o600
        assert f"RANK_ID={rank}" in dump.read_text().splitlines()
