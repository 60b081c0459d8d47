"""mslaunch as a drop-in for msrun, end to end with real MindSpore 2.10 (CPU) and msrun itself.

Every command line is one from MindSpore's msrun docs; it runs with ``msrun`` replaced by
``python -m launcher run`` and is held to what ``msrun`` itself does with it: exit code, the log
files' names and places, what reaches the console, the collective's result.  What msrun does was
seen by running it beside mslaunch on the MindSpore versions of :data:`MSRUN_SEEN_ON`; on another
version the two-node case runs msrun too (its own ports and folders) and holds it to the same
expectations, so a MindSpore whose msrun changed fails here (then check msrun's new behaviour, and
add the version once mslaunch matches it).  Per-node mode runs on the namespace cluster without
SSH: one launcher started inside each node's namespace, as a cluster manager would.

Each case proves something different:

* two nodes with ``--node_rank 0/1`` and the docs' ``--join=True --log_dir --cluster_time_out``
  plus ``--worker_log_name`` (``{hostname}`` and ``{ip}``) and ``--tail_worker_log``: msrun's logs
  and console per node (msrun beside it on a MindSpore version not in :data:`MSRUN_SEEN_ON`);
* one node, no flag: the zygote forks the scheduler and both workers, with the docs' single-node
  line (``--worker_log_name={hostname}``, ``--tail_worker_log=0``) held to what msrun does on node 0;
* two nodes, a worker on node 1 fails: node 1 fails with its summary, node 0 ends (MindSpore's
  heartbeat, its timeout cut to seconds) with a summary naming the ranks its scheduler lost;
  nothing is left running.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from typing import Dict, List, Optional, Sequence, Tuple

import pytest

from tests.harness.cli import mslaunch_argv
from tests.integration.test_e2e_mindspore import assert_no_pids_left as assert_summary_pids_gone

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NET = os.path.join(ROOT, "tests", "scripts", "msrun_net.py")
BIN = os.path.dirname(sys.executable)
MSRUN = os.path.join(BIN, "msrun")

pytestmark = pytest.mark.mindspore(also=os.access(MSRUN, os.X_OK), what="mindspore (with msrun)")

#: MindSpore versions whose msrun was run beside mslaunch on the two-node case and did what it
#: expects (the logs' names and places, the console, the collective's result, exit 0 per node);
#: on these the case runs mslaunch alone (msrun's five processes, each importing MindSpore, were
#: two thirds of its CPU).
MSRUN_SEEN_ON = frozenset({"2.10.0"})


def mindspore_version() -> str:
    from importlib.metadata import version

    return version("mindspore")


#: files mslaunch adds to a log dir besides msrun's logs
MSLAUNCH_FILES = {"plan.json", "summary.json", "job.json", "events.jsonl", "metrics.jsonl"}


def job_env(**extra: str) -> Dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = BIN + os.pathsep + env.get("PATH", "")  # msrun runs the bare `python` on PATH
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(extra)
    return env


def launcher_argv(which: str) -> List[str]:
    return [MSRUN] if which == "msrun" else mslaunch_argv("run")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def results(log_dir: str, names: List[str]) -> Dict[str, Tuple[int, int, float]]:
    out = {}
    for name in names:
        text = open(os.path.join(log_dir, name), errors="replace").read()
        m = re.search(r"^net rank=(\d+) size=(\d+) sum=([\d.]+)$", text, re.M)
        out[name] = (int(m.group(1)), int(m.group(2)), float(m.group(3))) if m else None
    return out


def log_files(log_dir: str) -> set:
    return {n for n in os.listdir(log_dir) if os.path.isfile(os.path.join(log_dir, n))} - MSLAUNCH_FILES


def start_nodes(
    cluster,
    which: str,
    work,
    port: int,
    extra_env: Optional[Dict[str, str]] = None,
    flags: Sequence[str] = (),
) -> List[subprocess.Popen]:
    """One launcher per namespace node (h1: node 0 owning the master address, h2: node 1)."""
    master = cluster.host(0).ip
    procs = []
    for k in (0, 1):
        ns = cluster.host(k).netns
        argv = (
            ["ip", "netns", "exec", ns]
            + launcher_argv(which)
            + [
                "--worker_num=4",
                "--local_worker_num=2",
                f"--master_addr={master}",
                f"--master_port={port}",
                f"--node_rank={k}",
                f"--log_dir={work / which / f'node{k}'}",
                "--join=True",
                "--cluster_time_out=120",
                *flags,
                NET,
            ]
        )
        out = open(work / f"{which}_node{k}.out", "w")
        procs.append(
            subprocess.Popen(argv, cwd=work, env=job_env(**(extra_env or {})), stdout=out, stderr=subprocess.STDOUT)
        )
    return procs


def wait_all(procs: List[subprocess.Popen], timeout: float = 400) -> List[int]:
    deadline = time.monotonic() + timeout
    try:
        return [p.wait(timeout=max(1.0, deadline - time.monotonic())) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


#: msrun's log and console flags, on both nodes: ``{ip}`` is each node's own address (towards the
#: master), the log's suffix is the global rank, ``--tail_worker_log`` names global ranks
DOCS_FLAGS = ("--worker_log_name=w_{hostname}_{ip}", "--tail_worker_log=0,3")


@pytest.mark.cost(30)  # measured alone (12-15 s), x2; with msrun beside it (another MindSpore) about twice that
def test_two_nodes_node_rank_like_msrun(netns_cluster, tmp_path):
    """msrun docs' two-node lines (--node_rank 0 / 1 on each node), each node started on its
    own inside its namespace: the logs msrun writes per node (named by --worker_log_name's
    {hostname} and {ip}), its console (--tail_worker_log=0,3: rank 0 on node 0, rank 3 on
    node 1, not ranks 1 and 2), AllReduce correct.  On a MindSpore not in MSRUN_SEEN_ON, msrun
    runs beside mslaunch (their own ports and folders) and is held to the same."""
    c = netns_cluster
    host = socket.gethostname()
    both = ("mslaunch",) if mindspore_version() in MSRUN_SEEN_ON else ("msrun", "mslaunch")
    procs = {which: start_nodes(c, which, tmp_path, free_port(), flags=DOCS_FLAGS) for which in both}
    got = wait_all([p for which in both for p in procs[which]])
    codes = {which: got[2 * i : 2 * i + 2] for i, which in enumerate(both)}
    for which in both:
        outs = [open(tmp_path / f"{which}_node{k}.out").read()[-3000:] for k in (0, 1)]
        assert codes[which] == [0, 0], (which, outs)
    for k, ranks, tail in ((0, (0, 1), 0), (1, (2, 3), 3)):
        names = [f"w_{host}_{c.host(k).ip}_{r}.log" for r in ranks]
        want = set(names) | ({"scheduler.log"} if k == 0 else set())
        (quiet,) = set(ranks) - {tail}
        for which in both:
            folder = str(tmp_path / which / f"node{k}")
            assert log_files(folder) == want, (which, k)
            assert results(folder, names) == {n: (r, 4, 10.0) for n, r in zip(names, ranks)}, (which, k)
            console = open(tmp_path / f"{which}_node{k}.out", errors="replace").read()
            assert f"net rank={tail} size=4 sum=10.0" in console, (which, k, console[-3000:])
            assert f"net rank={quiet} size=4" not in console, (which, k)
        assert_summary_pids_gone(str(tmp_path / "mslaunch" / f"node{k}"))
    assert c.all_pids() == {}


@pytest.mark.cost(40)  # measured alone (17-23 s), x2
def test_two_nodes_worker_failure_on_node1(netns_cluster, tmp_path):
    """Rank 2 (node 1) exits 3 after the cluster is built: node 1's mslaunch fails with rank 2's
    exit code; node 0's ends too, by whichever of MindSpore's detections comes first: the
    scheduler losing node 1's heartbeats (the summary then names the lost ranks), or a node-0
    worker's collective failing for want of its peers (that worker is then the root cause, its
    log showing the failed collective, or, when its log names the collective's timeout, the
    attempt is hung, exit 125); nothing is left running.

    MindSpore's node timeout (the heartbeat's; half a minute by default here) is cut to 10 s, and the CPU
    collectives' own timeout raised past it, so that node 0 ends as it does by default (its
    scheduler notices first) without waiting half a minute for it."""
    env = {"NET_FAIL_RANK": "2", "MS_NODE_TIMEOUT": "10", "MS_CPU_COMM_OP_TIMEOUT": "120"}
    codes = wait_all(start_nodes(netns_cluster, "mslaunch", tmp_path, free_port(), env))
    node0 = json.load(open(tmp_path / "mslaunch" / "node0" / "summary.json"))
    node1 = json.load(open(tmp_path / "mslaunch" / "node1" / "summary.json"))
    assert codes[1] == 3, open(tmp_path / "mslaunch_node1.out").read()[-3000:]
    assert node1["status"] == "failed" and node1["root_cause"]["name"] == "rank 2"
    assert codes[0] != 0 and node0["status"] in ("failed", "hung")
    if re.search(r"the scheduler lost rank\(s\) [23]", node0["message"]):
        assert "the scheduler lost rank(s)" in open(tmp_path / "mslaunch_node0.out").read()
    elif (
        node0["status"] == "hung"
    ):  # a node-0 worker's collective timed out for want of its peers: a hang (docs/long-jobs.md)
        assert codes[0] == 125 and node0["hang"]["kind"] == "collective_timeout", node0.get("hang")
    else:  # a node-0 worker saw the loss first, in its collective
        cause = node0["root_cause"]["name"]
        assert cause in ("rank 0", "rank 1"), node0["message"]
        log = open(tmp_path / "mslaunch" / "node0" / f"worker_{cause.split()[1]}.log", errors="replace").read()
        assert re.search(r"AllReduce|AllGather|Broadcast", log) and "RuntimeError" in log, (
            node0["message"],
            log[-2000:],
        )
    for k, ranks in ((0, (0, 1)), (1, (2, 3))):  # msrun's default log names, per node
        want = {f"worker_{r}.log" for r in ranks} | ({"scheduler.log"} if k == 0 else set())
        assert want <= log_files(str(tmp_path / "mslaunch" / f"node{k}")), k
        assert_summary_pids_gone(str(tmp_path / "mslaunch" / f"node{k}"))
    assert netns_cluster.all_pids() == {}


@pytest.mark.cost(20)  # measured alone (9-10 s), x2
def test_zygote_forked_ranks_run_collectives_by_default(tmp_path):
    """No flag (a MindSpore CPU job): the zygote imports MindSpore once; it is single-threaded
    after that import, so the scheduler (MindSpore's init() alone) and both workers are forked
    from it (no fallback line), build the cluster and AllReduce correctly; nothing is left.  No
    rank is bound to a core by default.

    The line is msrun docs' single-node one (--worker_num --local_worker_num --master_port
    --log_dir --join=True --cluster_time_out, plus --worker_log_name={hostname} and
    --tail_worker_log=0): the logs are named as msrun names node 0's (its naming and console
    checked against msrun's in test_two_nodes_node_rank_like_msrun), rank 0's output reaches the
    console, rank 1's does not."""
    log_dir = tmp_path / "z"
    host = socket.gethostname()
    r = subprocess.run(
        launcher_argv("mslaunch")
        + [
            "--worker_num=2",
            "--local_worker_num=2",
            f"--master_port={free_port()}",
            f"--log_dir={log_dir}",
            "--join=True",
            "--cluster_time_out=300",
            "--worker_log_name=w_{hostname}",
            "--tail_worker_log=0",
            NET,
        ],
        cwd=tmp_path,
        env=job_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    assert "mslaunch: start: Python ranks forked from one process that imported mindspore once" in r.stderr, r.stderr
    assert "mslaunch: zygote:" not in r.stderr, r.stderr
    assert "the scheduler runs MindSpore's init() alone" in r.stderr  # forked too, not the script
    plan = json.loads((log_dir / "plan.json").read_text())
    assert all("cpus" not in p for p in plan["ranks"]) and any("no core binding" in n for n in plan["cpu"]["notes"])
    names = [f"w_{host}_0.log", f"w_{host}_1.log"]
    assert log_files(str(log_dir)) == set(names) | {"scheduler.log"}
    assert results(str(log_dir), names) == {names[0]: (0, 2, 3.0), names[1]: (1, 2, 3.0)}
    # --tail_worker_log=0: rank 0's output reaches the console, rank 1's does not
    assert "net rank=0 size=2 sum=3.0" in r.stdout and "net rank=1 size=2" not in r.stdout, r.stdout[-3000:]
    summary = assert_summary_pids_gone(str(log_dir))
    assert summary["status"] == "succeeded" and len(summary["processes"]) == 3
