#!/usr/bin/env python3
"""Elastic (``--min-hosts``): a job that loses two of its three hosts at once goes on with one, then
grows back, all in one run on namespace hosts over ssh with the reference trainer.

The job: ``launcher.workloads.resnet50_cifar10`` (ResNet-14, 32x32 synthetic CIFAR-10, micro-batch
8, ``--ckpt-every`` 5), 3 ranks on 3 namespace hosts (``tests/harness/netns_cluster.py``), one per
host, no spare; ``--min-hosts 1 --rejoin-after 0``.  Once rank 0 logged step ``--cut-at`` the links
of hosts 2 and 3 are cut together (their ranks alive behind them, as behind a failed switch);
attempt 1 runs 1 rank accumulating 3 micro-batches per step (the planned global batch of 24).
The links come back; once attempt 1 trained ``--small-steps`` steps its rank is SIGKILLed, and
attempt 2 runs 3 ranks again (the hosts answer: taken back) from attempt 1's checkpoint.

Printed, measured in the same run:

* **from the loss to the first step on fewer hosts**: the cut to attempt 1's first new step, in
  phases (the cut to the failure mslaunch saw: noticing the silent hosts; to the restart: the
  teardown; to the first new step: the restart), against the anchor of the same job's ordinary
  restart (the kill in attempt 1 to attempt 2's first new step): their ratio;
* **throughput per rank** (images per second per rank: optimizer steps per second x the global
  batch / ranks) before (attempt 0), on one host (attempt 1), and back at full size (attempt 2),
  from the steps' times in ``metrics.jsonl``; and the job's step rate in each, with its ratio to
  attempt 0's (one host holds a third of the CPU work of three here, but all three share this
  machine's 2 cores, so the ratio says more about this machine than about a cluster).

Usage: python bench/bench_elastic.py [--steps 40] [--cut-at 8] [--small-steps 8] [--keep DIR]
Needs root (namespaces), OpenSSH and MindSpore.  Exit 0 when the job ended 0 with every step.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchkit import exit_if_cannot_run, job_events, step_rate, step_times, wait_until  # noqa: E402  (after sys.path)

from tests.harness.faultstream import rank_pids  # noqa: E402  (after sys.path is set above)
from tests.harness.netns_cluster import NamespaceCluster  # noqa: E402  (after sys.path is set above)

PY = sys.executable
BATCH = 8


def _steps(job: str) -> List[Dict[str, Any]]:
    return [{"attempt": k, "time": t} for k in range(3) for t in step_times(job, k)]


def _first_new_step(job: str, attempt: int) -> Optional[float]:
    rows = [r for r in _steps(job) if r.get("attempt") == attempt]
    return min(r["time"] for r in rows) if rows else None


def _rate(job: str, attempt: int) -> Optional[float]:
    """Optimizer steps per second of rank 0 in ``attempt``, its first step (compile) left out."""
    return step_rate(step_times(job, attempt)[1:])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--cut-at", type=int, default=8)
    ap.add_argument("--small-steps", type=int, default=8)
    ap.add_argument("--keep", help="keep the job's files in this folder")
    args = ap.parse_args()
    exit_if_cannot_run()
    work = args.keep or tempfile.mkdtemp(prefix="bench-elastic-")
    os.makedirs(work, exist_ok=True)
    data, job, ckpt = (os.path.join(work, n) for n in ("data", "job", "ckpt"))
    subprocess.run(
        [PY, "-m", "launcher.workloads.cifar10_synth", data, "--train", "1200", "--test", "50"],
        check=True,
        capture_output=True,
    )
    mark = f"elastic-{os.getpid()}"
    code: Optional[int] = None
    with NamespaceCluster(3, slots=1) as c:
        inv = os.path.join(work, "inv.yaml")
        with open(inv, "w") as fh:
            fh.write(f'defaults:\n  slots: 1\n  ssh: {{user: root, port: 22, key: "{c.key_path}"}}\nhosts:\n')
            fh.write("".join(f"  - host: {h.ip}\n" for h in c.hosts))
        argv = [
            PY, "-m", "launcher", "run", "--hosts", inv, "--np", "3", "--master-port", "auto", "--log-dir", job,
            "--tee", "none", "--quiet", "--grace", "5", "--max-restarts", "3", "--min-hosts", "1",
            "--rejoin-after", "0", "--env", "GLOG_v=3", "--env", f"FAULT_STREAM_MARK={mark}",
            "-m", "launcher.workloads.resnet50_cifar10", "--arch", "resnet14", "--data-path", data,
            "--image-size", "32", "--batch-size", str(BATCH), "--workers", "1", "--epochs", "1",
            "--steps-per-epoch", str(args.steps), "--ckpt-dir", ckpt, "--ckpt-every", "5",
        ]  # fmt: skip
        env = dict(os.environ, MSLAUNCH_SSH_CONFIG=c.ssh_config)
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        try:
            log0 = os.path.join(job, "worker_0.log")
            wait_until(lambda: os.path.exists(log0) and f"step: {args.cut_at}," in open(log0).read(), 600, "the cut")
            t_cut = time.time()
            c.cut_link(1)
            c.cut_link(2)
            wait_until(lambda: any(e["kind"] == "resized" for e in job_events(job)), 300, "attempt 1 planned")
            c.restore_link(1)
            c.restore_link(2)
            t_small = wait_until(lambda: _first_new_step(job, 1), 600, "attempt 1's first step")
            wait_until(lambda: len([r for r in _steps(job) if r["attempt"] == 1]) >= args.small_steps, 600, "steps")
            t_kill = time.time()
            os.kill(rank_pids(mark, job)[("1", 0)], signal.SIGKILL)
            t_full = wait_until(lambda: _first_new_step(job, 2), 600, "attempt 2's first step")
            proc.communicate(timeout=1800)
            code = proc.returncode
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        left = c.all_pids()
    ev = job_events(job)
    failure = [e["time"] for e in ev if e["kind"] in ("failure", "hung") and e["time"] >= t_cut]
    restart = [e["time"] for e in ev if e["kind"] == "restart" and e["time"] >= t_cut]
    shrink = t_small - t_cut
    ordinary = t_full - t_kill
    print(f"job: 3 ranks on 3 namespace hosts, ResNet-14, micro-batch {BATCH}, {args.steps} steps; exit code {code}")
    print(
        f"from the cut of 2 links to the first step on 1 host: {shrink:.1f} s "
        f"(noticed {failure[0] - t_cut:.1f} s, teardown {restart[0] - failure[0]:.1f} s, "
        f"restart to the first step {t_small - restart[0]:.1f} s)"
    )
    print(f"anchor, the same job's ordinary restart (a rank killed -> first step at full size): {ordinary:.1f} s")
    print(f"ratio shrink / ordinary restart: {shrink / ordinary:.2f}")
    sizes = {0: 3, 1: 1, 2: 3}
    base = _rate(job, 0)
    for attempt, name in ((0, "before (3 ranks)"), (1, "on 1 host (1 rank, K=3)"), (2, "back (3 ranks)")):
        rate = _rate(job, attempt)
        if rate is None or base is None:
            print(f"{name}: too few steps to time")
            continue
        per_rank = rate * BATCH * 3 / sizes[attempt]
        print(f"{name}: {rate:.2f} steps/s, {per_rank:.1f} img/s per rank; step rate {rate / base:.2f}x attempt 0's")
    summary = json.load(open(os.path.join(job, "summary.json")))
    print(f"resized: {summary.get('resized')}")
    print(f"nothing left on any host: {not left} {left or ''}")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if code == 0 and not left else 1


if __name__ == "__main__":
    sys.exit(main())
