#!/usr/bin/env python3
"""Goodput under Slurm with a lost node: the reference trainer as Slurm steps on the namespace
Slurm cluster, fault-free and with a node lost mid-job, and the same fault for a baseline, all in
one run (``bench/bench_goodput.py`` is the ssh stream; this is its Slurm variant).

The job: ``launcher.workloads.resnet50_cifar10`` (ResNet-14, 32x32 synthetic CIFAR-10, batch 8,
``--ckpt-every`` 5 steps), ``mslaunch run --launcher slurm --np 3`` in an allocation of 4 nodes
(``salloc --no-kill -N4``, one task a node): 3 ranks, node 4 spare.  Runs, back to back:

1. **fault-free**: its wall time F;
2. **faulty**: the same job; once it trained ``--at`` new steps, the link of a node with a rank
   (never the first: the scheduler runs there) goes down (:mod:`tests.harness.faultstream`'s
   ``cut``: the node's processes stay alive behind it, its slurmd stops answering), and comes back
   once the job trained a new step elsewhere; mslaunch learns the node is lost from its shims'
   heartbeats (5 s of silence: ``launcher/execution/slurm/beat.py``), sooner than from Slurm
   (``scontrol show node``: not responding, then down, after ``SlurmdTimeout``, 10 s here), and
   restarts on the spare node.  Its wall time W: **ETTR = F / W**, the badput by
   phase, whether it ended 0 by itself with every step and nothing left on any node;
3. **baseline**, what a user of srun alone gets (``--max-restarts 0``, no watch beyond
   MindSpore's own timeouts, no heartbeats: ``MSLAUNCH_SLURM_HEARTBEAT=off``): the job fails at
   the lost node.

Usage: python bench/bench_goodput_slurm.py [--steps 160] [--at 80] [--no-baseline] [--keep DIR]
Needs root (namespaces), Slurm 22.05 (slurmctld, slurmd) and MindSpore.  Exit 0 when the faulty
run ended 0 with every step.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, cast

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench_goodput import job_argv, report, run_streamed, trainer_argv  # noqa: E402  (bench/ is this script's folder)
from benchkit import exit_if_cannot_run  # noqa: E402  (after sys.path is set above)

from tests.harness.faultstream import FaultStream, Injected  # noqa: E402  (after sys.path is set above)
from tests.harness.netns_cluster import NamespaceCluster  # noqa: E402
from tests.harness.slurm_cluster import SlurmCluster, slurm_unavailable_reason  # noqa: E402

PY = sys.executable
ACTIVE = 3  # nodes with a rank; one more is spare


class SlurmLinks:
    """What the fault stream needs of a cluster for ``cut``, by Slurm node name (node k is the
    namespace host k of the Slurm cluster's network)."""

    def __init__(self, c: SlurmCluster) -> None:
        self.c = c

        self.net = cast(NamespaceCluster, c.net)

    def _ip(self, node: str) -> str:
        return self.net.hosts[self.c.nodes.index(node)].ip

    def cut_link(self, node: str) -> None:
        self.net.cut_link(self._ip(node))

    def restore_link(self, node: str, *, wait: bool = True) -> None:
        self.net.restore_link(self._ip(node), wait=wait)


def run_job(
    name: str, c: SlurmCluster, env: Dict[str, str], work: str, data: str, steps: int, flags: List[str], at: int = 0
) -> Dict[str, object]:
    """One job in the allocation ``env``; with ``at``, a node cut once it trained ``at`` new steps."""
    folder = os.path.join(work, name)
    os.makedirs(folder)
    job, ckpt = os.path.join(folder, "job"), os.path.join(folder, "ckpt")
    mark = f"goodput-slurm-{name}-{os.getpid()}"
    argv = job_argv(["--launcher", "slurm"], job, mark, flags, trainer_argv(data, steps, ckpt))
    fs = None
    if at:
        fs = FaultStream(job, kinds=["cut"], at_steps=[at], mark=mark, seed=1, cluster=SlurmLinks(c))
    run = run_streamed(argv, env, folder, fs)
    faults: List[Injected] = run["faults"]  # type: ignore[assignment]  # run_streamed's dict: the faults
    last = os.path.join(ckpt, "ckpt_0", f"resnet14-1_{steps}.ckpt")
    run.update(left=settle(c, [f.host for f in faults]), job=job, kinds=["cut"] if at else [])
    run["final"] = last if os.path.exists(last) else None
    return run


def settle(c: SlurmCluster, cut: List[str], within: float = 60.0) -> Dict[str, List[int]]:
    """What the job left on the nodes once every node is back: a node whose link was cut stayed
    down for Slurm; ``ReturnToService=2`` takes it back once it answers, and its slurmd ends what it
    still ran of a step of a job the node is no longer part of."""
    for node in cut:
        c.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], timeout=30)
    deadline = time.monotonic() + within
    while True:
        left = c.node_pids(include_slurm=False)
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=160, help="optimizer steps of the job")
    ap.add_argument("--at", type=int, default=80, help="new steps trained before the node is lost")
    ap.add_argument("--no-baseline", action="store_true")
    ap.add_argument("--keep", default=None, help="keep the jobs' folders here")
    args = ap.parse_args()
    exit_if_cannot_run()
    why = slurm_unavailable_reason()
    if why:
        print(f"skipped: {why}")
        return 0
    work = args.keep or tempfile.mkdtemp(prefix="bench-goodput-slurm-")
    os.makedirs(work, exist_ok=True)
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    try:
        data = os.path.join(work, "data")
        subprocess.run(
            [PY, "-m", "launcher.workloads.cifar10_synth", data, "--train", str(2 * args.steps * 8 * ACTIVE)]
            + ["--test", "100"],
            check=True,
            capture_output=True,
        )
        base: Optional[Dict[str, object]] = None
        with SlurmCluster(ACTIVE + 1, cpus=2) as c:
            with c.allocation(nodes=ACTIVE + 1, per_node=1, extra=["--no-kill"]) as env:
                env["PYTHONPATH"] = ROOT
                flags = ["--max-restarts", "4"]
                free = run_job("fault-free", c, env, work, data, args.steps, flags)
                assert free["code"] == 0 and free["final"] is not None, free["err"]
                print(f"fault-free: {free['wall']:.1f} s for {args.steps} steps")
                faulty = run_job("faulty", c, env, work, data, args.steps, flags, at=args.at)
            report("mslaunch under Slurm (--max-restarts 4, a spare node), a node lost", faulty, free)
            if not args.no_baseline:
                with c.allocation(nodes=ACTIVE, per_node=1, extra=["--no-kill"]) as env:
                    env["PYTHONPATH"] = ROOT
                    flags = ["--max-restarts", "0", "--stopped-timeout", "off", "--hang-timeout", "off"]
                    flags += ["--straggler", "off", "--cold-restarts", "--env", "MS_COMPILER_CACHE_ENABLE=0"]
                    env["MSLAUNCH_SLURM_HEARTBEAT"] = "off"  # srun alone hears of a node from Slurm only
                    base = run_job("baseline", c, env, work, data, args.steps, flags, at=args.at)
                report("baseline (srun alone: no restart, no spare)", base, free)
        print(f"\nload average after: {os.getloadavg()[0]:.2f}")
        return 0 if faulty["code"] == 0 and faulty["final"] is not None and faulty["faults"] else 1
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
