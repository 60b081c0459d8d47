#!/usr/bin/env python3
"""Chaos bench: the fault matrix, N runs per case per backend; prints survivors found / runs.

Backends: ``local``, ``mpirun`` (this machine), ``ssh`` (a 2-host namespace cluster from
``tests/harness/netns_cluster.py``; needs root, ``ip netns``, OpenSSH) and ``mpirun-ssh`` (mpirun across
the namespace cluster: its rsh agent and remote orteds; not in the default set).  Every rank (and the scheduler)
is ``tests/scripts/escaper.py``: it starts a child ``sleep`` in its process group and a
grandchild that left through a double fork and ``setsid``; every process carries a per-run
marker in its command line, so survivors are found through /proc whether recorded or not.

Cases (each run waits until mslaunch catches SIGTERM, i.e. its first statement ran, then a
random 0..3 s, so the fault lands anywhere in start-up or while the job runs; before that
first statement the interpreter itself is starting and a signal ends it with no code run):

* ``sigkill``  SIGKILL to mslaunch;
* ``sigterm`` / ``sigint``  SIGTERM / SIGINT to mslaunch; also checks that the job's
  ``summary.json`` says ``stopped`` and mslaunch exited 128+N ("lost" counts the runs where not);
* ``crash``  rank 0 kills itself with SIGSEGV 0.5 s after it started (no signal to mslaunch);
  also checks exit code 139 and the root cause.

A run has survivors when, 15 s after mslaunch exited, a marked process or one of mslaunch's
descendants (snapshot taken just before the fault) still runs; they are killed then.

Usage::

    python bench/bench_chaos.py [--runs 3] [--backends local,mpirun,ssh] [--cases sigkill,sigterm,sigint,crash]

Exit code: 0 when no case had survivors or lost summaries, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.harness.faultkit import ESCAPER, handles_sigterm, kill_all, new_marker, survivors, tree, wait_for  # noqa: E402  (after sys.path is set above)

CASES = ("sigkill", "sigterm", "sigint", "crash")
SIGNALS = {"sigkill": signal.SIGKILL, "sigterm": signal.SIGTERM, "sigint": signal.SIGINT}


def one_run(backend: str, case: str, work: str, hosts_args: List[str], env: Dict[str, str]) -> Tuple[bool, bool, float]:
    """(survivors found, summary lost or wrong, delay) of one run."""
    marker = new_marker()
    job = tempfile.mkdtemp(prefix="job-", dir=work)
    os.rmdir(job)
    mode = ("segv", "0") if case == "crash" else ("hang",)
    argv = [
        sys.executable,
        "-m",
        "launcher",
        "run",
        "--master-port",
        "auto",
        "--no-sched-wait",
        "--log-dir",
        job,
        "--tee",
        "none",
        "--grace",
        "2",
        *hosts_args,
    ]
    if backend.startswith("mpirun"):
        argv += ["--launcher", "mpirun"]
    argv += ["--no-python", sys.executable, ESCAPER, marker, *mode]
    delay = random.uniform(0.0, 3.0)
    proc = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, cwd=work
    )
    bad = False
    snapshot: Dict[int, float] = {}
    try:
        if case == "crash":
            _, err = proc.communicate(timeout=120)
            summary = _summary(job)
            cause = (summary or {}).get("root_cause") or {}
            bad = proc.returncode != 139 or (cause.get("name"), cause.get("signal")) != ("rank 0", "SIGSEGV")
        else:
            wait_for(lambda: handles_sigterm(proc.pid) or proc.poll() is not None, 60, interval=0.005)
            try:
                proc.communicate(timeout=delay)
            except subprocess.TimeoutExpired:
                pass
            snapshot = tree(proc.pid)
            sig = SIGNALS[case]
            proc.send_signal(sig)
            _, err = proc.communicate(timeout=120)
            if case != "sigkill":
                summary = _summary(job)
                bad = proc.returncode != 128 + sig or summary is None or summary.get("status") != "stopped"
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        bad = True
    left = survivors(marker, snapshot, timeout=15.0)
    kill_all(left)
    return bool(left), bad, delay


def _summary(job: str) -> Optional[dict]:
    try:
        with open(os.path.join(job, "summary.json")) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--backends", default="local,mpirun,ssh")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--seed", type=int, default=None)
    args = ap.parse_args()
    random.seed(args.seed)
    backends = [b for b in args.backends.split(",") if b]
    cases = [c for c in args.cases.split(",") if c]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    rows = []
    with tempfile.TemporaryDirectory(prefix="mslchaos-") as work:
        env["MSLAUNCH_HOME"] = os.path.join(work, "home")
        env["PIDDIR"] = work
        for backend in backends:
            cluster = None
            hosts_args = ["--np", "2"]
            if backend.startswith("mpirun") and shutil.which("mpirun") is None:
                print(f"{backend:7s} skipped: mpirun not installed")
                continue
            if backend in ("ssh", "mpirun-ssh"):
                from tests.harness.conftest_netns import netns_unavailable_reason
                from tests.harness.netns_cluster import NamespaceCluster

                reason = netns_unavailable_reason()
                if reason:
                    print(f"{backend:7s} skipped: {reason}")
                    continue
                cluster = NamespaceCluster(2, slots=1)
                hosts_args = ["--hosts", cluster.inventory_yaml]
                if backend == "mpirun-ssh":  # mpirun's rsh agent and remote orteds
                    hosts_args = ["--hosts", cluster.hostfile, "--nic", str(cluster.subnet)]
                env_b = dict(env, MSLAUNCH_SSH_CONFIG=cluster.ssh_config)
            else:
                env_b = env
            try:
                for case in cases:
                    found = lost = 0
                    t0 = time.monotonic()
                    for _ in range(args.runs):
                        s, b, _delay = one_run(backend, case, work, hosts_args, env_b)
                        found += s
                        lost += b
                    rows.append((backend, case, found, lost, args.runs, time.monotonic() - t0))
                    print(
                        f"{backend:7s} {case:8s} survivors {found}/{args.runs}  lost-or-wrong {lost}/{args.runs}  "
                        f"({time.monotonic() - t0:.0f} s)",
                        flush=True,
                    )
            finally:
                if cluster is not None:
                    cluster.close()
    total_found = sum(r[2] for r in rows)
    total_lost = sum(r[3] for r in rows)
    runs = sum(r[4] for r in rows)
    print(f"total: survivors in {total_found}/{runs} runs, lost or wrong summaries in {total_lost}/{runs} runs")
    return 0 if rows and total_found == 0 and total_lost == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
