#!/usr/bin/env python3
"""Benchmark: the slurm backend against the ssh backend on the SAME namespace nodes, in one run.

One 3-node Slurm cluster (``tests/harness/slurm_cluster.py``: a namespace per node with its own
address, its sshd and its slurmd; needs root, ``ip netns``, OpenSSH and Slurm 22.05).  The job:
6 ranks (2 per node) of the dynamic method, each ``python -S`` writing its start time into a
shared folder.  Alternating runs (median of ``--runs``) of

* ``mslaunch run --launcher ssh --hosts <the nodes' hostfile>`` and
* ``mslaunch run --launcher slurm`` inside an allocation of the same 3 nodes (``salloc``),

measuring

* **start**: from just before the command starts to the latest rank's start time;
* **failure-to-exit**: rank 3 exits 3 one second after start while the others would sleep 60 s:
  from rank 3's exit to mslaunch's exit (exit code 3 checked);

then counts the job processes left on the nodes (must be 0) and prints both sides of each ratio.

Usage::

    python bench/bench_slurm.py [--runs 3]

Exit code: 0 when every run succeeded and nothing was left, 1 otherwise, 2 when the cluster
cannot run here.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchkit import RANK_PROGRAM_HEAD, exit_if_cannot_run, wait_stamps  # noqa: E402

RANK_PROGRAM = RANK_PROGRAM_HEAD + """\
rank = os.environ["RANK_ID"]
with open(os.path.join(sys.argv[1], "rank_" + rank), "w") as fh:
    fh.write(repr(time.time()))
if sys.argv[2] == "fail" and rank == "3":
    time.sleep(1.0)
    with open(os.path.join(sys.argv[1], "failed"), "w") as fh:
        fh.write(repr(time.time()))
    sys.exit(3)
time.sleep(1.0 if sys.argv[2] == "ok" else 60.0)
"""
RANKS = 6


def run_job(backend: str, mode: str, work: str, env: Dict[str, str], hostfile: str) -> Tuple[float, float, int]:
    """One job; (start seconds, failure-to-exit seconds or 0, exit code)."""
    stamps = tempfile.mkdtemp(dir=work)
    job = os.path.join(work, f"job-{os.path.basename(stamps)}")
    inv = ["--hosts", hostfile] if backend == "ssh" else []
    argv = [sys.executable, "-m", "launcher", "run", "-q", "--launcher", backend, *inv, "--np", str(RANKS), "--master-port", "auto",
            "--grace", "2", "--log-dir", job, "--no-python", sys.executable, "-S", os.path.join(work, "rank.py"), stamps, mode]
    start = time.time()
    proc = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=180)
    ended = time.time()
    want = 0 if mode == "ok" else 3
    if proc.returncode != want:
        raise RuntimeError(f"{backend} {mode}: exit {proc.returncode}: {proc.stderr[-2000:]}")
    started = max(wait_stamps(stamps, RANKS, timeout=60.0)) - start
    fail_to_exit = 0.0
    if mode == "fail":
        fail_to_exit = ended - float(open(os.path.join(stamps, "failed")).read())
    return started, fail_to_exit, proc.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per backend and case (median reported)")
    args = parser.parse_args()
    exit_if_cannot_run(slurm=True)
    from tests.harness.slurm_cluster import SlurmCluster

    results: Dict[Tuple[str, str], List[Tuple[float, float]]] = {}
    left_total = 0
    with SlurmCluster(3) as cluster, tempfile.TemporaryDirectory(prefix="mslbench-") as work:
        with open(os.path.join(work, "rank.py"), "w") as fh:
            fh.write(RANK_PROGRAM)
        base = cluster.env()
        base["PYTHONPATH"] = ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")
        base["MSLAUNCH_HOME"] = os.path.join(work, "home")
        base["MSLAUNCH_SSH_CONFIG"] = cluster.net.ssh_config
        with cluster.allocation(3, 2) as alloc_env:
            alloc_env = dict(alloc_env, PYTHONPATH=base["PYTHONPATH"], MSLAUNCH_HOME=base["MSLAUNCH_HOME"])
            envs = {"ssh": base, "slurm": alloc_env}
            for backend in ("ssh", "slurm"):  # warm-up (page cache, sshd forks, slurmd)
                run_job(backend, "ok", work, envs[backend], cluster.net.hostfile)
            for _ in range(args.runs):
                for mode in ("ok", "fail"):
                    for backend in ("ssh", "slurm"):
                        started, f2e, _ = run_job(backend, mode, work, envs[backend], cluster.net.hostfile)
                        results.setdefault((backend, mode), []).append((started, f2e))
                        left = cluster.node_pids(include_slurm=False)
                        left_total += sum(len(v) for v in left.values())
                        print(f"  {backend:5} {mode:4}: start {started:.3f} s" + (f", failure-to-exit {f2e:.3f} s" if mode == "fail" else "")
                              + (f", LEFT {left}" if left else ""), file=sys.stderr)
        cluster.wait_idle()
        left_total += sum(len(v) for v in cluster.node_pids(include_slurm=False).values())

    def med(backend: str, mode: str, idx: int) -> float:
        return statistics.median(r[idx] for r in results[(backend, mode)])

    s_ssh, s_slurm = med("ssh", "ok", 0), med("slurm", "ok", 0)
    f_ssh, f_slurm = med("ssh", "fail", 1), med("slurm", "fail", 1)
    print(f"3 namespace nodes, {RANKS} ranks (2 per node) + scheduler, dynamic method; median of {args.runs} (s); machine shared")
    print(f"{'':24}{'ssh':>9}{'slurm':>9}{'slurm/ssh':>11}")
    print(f"{'time to all ranks started':24}{s_ssh:>9.3f}{s_slurm:>9.3f}{s_slurm / s_ssh:>11.2f}")
    print(f"{'failure-to-exit':24}{f_ssh:>9.3f}{f_slurm:>9.3f}{f_slurm / f_ssh:>11.2f}")
    print(f"job processes left on the nodes after all runs: {left_total}")
    return 0 if left_total == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
