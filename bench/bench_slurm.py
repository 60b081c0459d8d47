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

then counts the job processes left on the nodes (must be 0: a process still there 3 s after
mslaunch exited; one seen at the exit that ends within those 3 s is printed, not counted) and prints
both sides of each ratio.

``--layouts`` adds the measure behind the backend's step layout, with plain ``srun`` in the same
allocation: N tasks started as ONE step (``--distribution=arbitrary``, what the backend does)
against N one-task steps started at once (one ``srun`` per rank), for N = 6 and 24: time to all
tasks started, and the ``srun`` processes and their total resident memory on the launching node.

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

from benchkit import RANK_PROGRAM_HEAD, exit_if_cannot_run, wait_stamps  # noqa: E402  (after sys.path is set above)

RANK_PROGRAM = (
    RANK_PROGRAM_HEAD
    + """\
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
)
RANKS = 6

#: A task of the layout measure: stamps its start, sleeps 2 s.
STAMP_PROGRAM = """\
import os, sys, time
with open(os.path.join(sys.argv[1], "rank_" + sys.argv[2] if len(sys.argv) > 2 else "rank_" + os.environ["SLURM_PROCID"]), "w") as fh:
    fh.write(repr(time.time()))
time.sleep(2.0)
"""


def _srun_rss(procs: List[subprocess.Popen]) -> int:
    """Total resident memory (bytes) of the given srun processes and their children."""
    import psutil

    total = 0
    for p in procs:
        try:
            ps = psutil.Process(p.pid)
            total += ps.memory_info().rss + sum(c.memory_info().rss for c in ps.children(recursive=True))
        except psutil.Error:
            pass
    return total


def run_layout(layout: str, n: int, nodes: List[str], work: str, env: Dict[str, str]) -> Tuple[float, int, int]:
    """N tasks of STAMP_PROGRAM, round-robin over ``nodes``, as one step or one step each;
    (seconds to all started, srun processes, their total RSS in bytes once all started)."""
    stamps = tempfile.mkdtemp(dir=work)
    prog = os.path.join(work, "stamp.py")
    placement = [nodes[i * len(nodes) // n] for i in range(n)]
    common = ["srun", "--overlap", "--overcommit", "--quiet"]
    start = time.time()
    if layout == "one step":
        hostfile = os.path.join(stamps, "hostfile")
        with open(hostfile, "w") as fh:
            fh.write("\n".join(placement) + "\n")
        procs = [
            subprocess.Popen(
                [
                    *common,
                    f"--ntasks={n}",
                    f"--nodes={len(nodes)}",
                    "--distribution=arbitrary",
                    "--kill-on-bad-exit=1",
                    sys.executable,
                    "-S",
                    prog,
                    stamps,
                ],
                env=dict(env, SLURM_HOSTFILE=hostfile),
            )
        ]
    else:
        procs = [
            subprocess.Popen(
                [*common, "--ntasks=1", "--nodes=1", f"--nodelist={node}", sys.executable, "-S", prog, stamps, str(r)],
                env=env,
            )
            for r, node in enumerate(placement)
        ]
    try:
        stamps_seen = wait_stamps(stamps, n, timeout=120.0)
        started = max(stamps_seen) - start
        rss = _srun_rss(procs)
        for p in procs:
            if p.wait(timeout=120) != 0:
                raise RuntimeError(f"{layout}: srun exited {p.returncode}")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return started, len(procs), rss


def left_on_nodes(cluster: object) -> Tuple[str, int]:
    """The job processes on the nodes just after a job (pid and command line, for the log), and
    how many of them are still there 3 s later (the ones that count as left)."""
    from tests.harness.slurm_cluster import _cmdline

    seen = cluster.node_pids(include_slurm=False)  # type: ignore[attr-defined]
    if not seen:
        return "", 0
    what = "; ".join(f"{node}: {pid} {_cmdline(pid)[:60]!r}" for node, pids in seen.items() for pid in pids)
    end = time.monotonic() + 3.0
    while time.monotonic() < end:
        left = cluster.node_pids(include_slurm=False)  # type: ignore[attr-defined]
        if not left:
            return f", at exit {what} (gone within 3 s)", 0
        time.sleep(0.05)
    return f", LEFT {what}", sum(len(v) for v in left.values())


def run_job(backend: str, mode: str, work: str, env: Dict[str, str], hostfile: str) -> Tuple[float, float, int]:
    """One job; (start seconds, failure-to-exit seconds or 0, exit code)."""
    stamps = tempfile.mkdtemp(dir=work)
    job = os.path.join(work, f"job-{os.path.basename(stamps)}")
    inv = ["--hosts", hostfile] if backend == "ssh" else []
    argv = [
        sys.executable,
        "-m",
        "launcher",
        "run",
        "-q",
        "--launcher",
        backend,
        *inv,
        "--np",
        str(RANKS),
        "--master-port",
        "auto",
        "--grace",
        "2",
        "--log-dir",
        job,
        "--no-python",
        sys.executable,
        "-S",
        os.path.join(work, "rank.py"),
        stamps,
        mode,
    ]
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
    parser.add_argument(
        "--layouts", action="store_true", help="also measure one step of N tasks vs N one-task steps (plain srun)"
    )
    args = parser.parse_args()
    exit_if_cannot_run(slurm=True)
    from tests.harness.slurm_cluster import SlurmCluster

    results: Dict[Tuple[str, str], List[Tuple[float, float]]] = {}
    layouts: Dict[Tuple[str, int], List[Tuple[float, int, int]]] = {}
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
                        what, left = left_on_nodes(cluster)
                        left_total += left
                        print(
                            f"  {backend:5} {mode:4}: start {started:.3f} s"
                            + (f", failure-to-exit {f2e:.3f} s" if mode == "fail" else "")
                            + what,
                            file=sys.stderr,
                        )
            if args.layouts:
                with open(os.path.join(work, "stamp.py"), "w") as fh:
                    fh.write(STAMP_PROGRAM)
                nodes = list(cluster.nodes)
                layout_env = {
                    k: v for k, v in alloc_env.items() if k != "SLURM_NTASKS_PER_NODE"
                }  # tasks placed by the test
                for _ in range(args.runs):
                    for n in (6, 24):
                        for layout in ("one step", "one per rank"):
                            got = run_layout(layout, n, nodes, work, layout_env)
                            layouts.setdefault((layout, n), []).append(got)
                            what, left = left_on_nodes(cluster)
                            left_total += left
                            print(
                                f"  {layout:12} {n:3} tasks: start {got[0]:.3f} s, {got[1]} srun, {got[2] / 2**20:.0f} "
                                f"MiB{what}",
                                file=sys.stderr,
                            )
        cluster.wait_idle()
        left_total += left_on_nodes(cluster)[1]

    def med(backend: str, mode: str, idx: int) -> float:
        return statistics.median(r[idx] for r in results[(backend, mode)])

    s_ssh, s_slurm = med("ssh", "ok", 0), med("slurm", "ok", 0)
    f_ssh, f_slurm = med("ssh", "fail", 1), med("slurm", "fail", 1)
    print(
        f"3 namespace nodes, {RANKS} ranks (2 per node) + scheduler, dynamic method; median of {args.runs} (s); "
        "machine shared"
    )
    print(f"{'':24}{'ssh':>9}{'slurm':>9}{'slurm/ssh':>11}")
    print(f"{'time to all ranks started':24}{s_ssh:>9.3f}{s_slurm:>9.3f}{s_slurm / s_ssh:>11.2f}")
    print(f"{'failure-to-exit':24}{f_ssh:>9.3f}{f_slurm:>9.3f}{f_slurm / f_ssh:>11.2f}")
    if layouts:
        print(f"step layout, plain srun in the same allocation; median of {args.runs}")
        print(
            f"{'tasks':>6}{'one step: start':>17}{'srun':>6}{'MiB':>6}{'one per rank: start':>21}{'srun':>6}{'MiB':>6}{'start ratio':>13}"  # noqa: E501 - kept whole: a literal line as the program sees it
        )
        for n in (6, 24):
            one, per = layouts[("one step", n)], layouts[("one per rank", n)]
            s1, sp = statistics.median(r[0] for r in one), statistics.median(r[0] for r in per)
            m1, mp = statistics.median(r[2] for r in one) / 2**20, statistics.median(r[2] for r in per) / 2**20
            print(f"{n:>6}{s1:>17.3f}{one[0][1]:>6}{m1:>6.0f}{sp:>21.3f}{per[0][1]:>6}{mp:>6.0f}{sp / s1:>13.2f}")
    print(f"job processes left on the nodes after all runs: {left_total}")
    return 0 if left_total == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
