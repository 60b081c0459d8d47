"""End to end with real MindSpore 2.10 (CPU): a failing MindSpore rank tears a local job down fast.

Each job costs ~10 s here; every case proves something different.  A local 2-rank AllReduce under the
default launcher is proven by ``test_msrun_e2e.py::test_zygote_forked_ranks_run_collectives_by_default``
(the default forks the ranks), ``mslaunch check``'s line by ``test_multihost.py`` (over ssh) and by the
docs block of docs/workload.md (locally), MindSpore under mpirun (two app contexts of one mpirun) by
``test_multihost.py::test_allreduce_through_mpirun_across_hosts``.
"""

from __future__ import annotations

import json
import os

import psutil
import pytest

from tests.harness.cli import run_process

pytestmark = pytest.mark.mindspore


def assert_no_pids_left(job_dir):
    summary = json.load(open(os.path.join(job_dir, "summary.json")))
    for proc in summary["processes"]:
        if proc.get("pid"):
            try:
                assert psutil.Process(proc["pid"]).status() == psutil.STATUS_ZOMBIE, proc
            except psutil.NoSuchProcess:
                pass
    return summary


FAIL = """
import os, sys, time
import mindspore as ms
from mindspore.communication import init, get_rank
ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
init()
if os.environ.get("MS_ROLE") == "MS_SCHED":
    sys.exit(0)
if get_rank() == 1:
    print("rank 1 gives up", flush=True)
    sys.exit(3)
time.sleep(300)
"""


def test_mindspore_rank_failure_tears_down_fast(tmp_path):
    script = tmp_path / "fail.py"
    script.write_text(FAIL)
    r = run_process(
        "run",
        "--np",
        "2",
        "--master-port",
        "auto",
        "--log-dir",
        str(tmp_path / "job"),
        str(script),
        cwd=tmp_path,
        timeout=300,
    )
    assert r.returncode == 3, r.stderr
    summary = assert_no_pids_left(tmp_path / "job")
    cause = summary["root_cause"]
    assert (cause["rank"], cause["exit_code"]) == (1, 3) and "rank 1 gives up" in cause["tail"]
    # the sleeping rank and the scheduler were ended by mslaunch, not waited for
    others = {p["name"]: p for p in summary["processes"] if p["name"] != "rank 1"}
    assert set(others) == {"scheduler", "rank 0"} and all(p["torn_down"] for p in others.values())
