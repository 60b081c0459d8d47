#!/usr/bin/env python3
"""Benchmark: time until every rank has started, over SSH, for 1, 2, 4, 8 and 16 hosts.

Each "host" is a network namespace with its own sshd (``tests/harness/netns_cluster.py``; needs root,
``ip netns`` and OpenSSH).  One rank per host; the rank is ``python -S`` writing its start time
into a shared folder, then sleeping 1 s.  For each cluster size, alternating
runs of

* ``mslaunch run`` of the dynamic method (parallel connects, one remote agent per host; the
  scheduler on host 1 first, as in every real job), timed from just before the command starts
  to the latest rank timestamp, and
* the same ranks started one ``ssh`` at a time by a serial loop of the OpenSSH client
  (``ssh -F CFG host 'nohup sh -c ... &'``, each waiting for the previous one), timed from the
  first ssh to the latest timestamp,

and prints the medians (of ``--runs``, default 3), the ratio of every size to the 1-host time
for mslaunch, and whether 16 hosts start within 2x the 1-host time.  Traffic stays on the
namespaces' private bridge.

Usage::

    python bench/bench_ssh_start.py [--sizes 1,2,4,8,16] [--runs 3]

Exit code: 0 when the target is met (or the largest size is not 16), 1 otherwise, 2 when
namespace clusters cannot run here.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchkit import RANK_PROGRAM_HEAD, exit_if_cannot_run, wait_stamps  # noqa: E402  (after sys.path is set above)

TARGET_RATIO = 2.0
RANK_SLEEP = 1.0


RANK_PROGRAM = (
    RANK_PROGRAM_HEAD
    + """\
with open(os.path.join(sys.argv[1], "rank_" + os.environ["RANK_ID"]), "w") as fh:
    fh.write(repr(time.time()))
time.sleep(float(sys.argv[2]))
"""
)


def rank_argv(work: str, stamps: str) -> List[str]:
    """The rank: ``python -S rank.py STAMPS SLEEP`` (writes its start time, sleeps)."""
    return [sys.executable, "-S", os.path.join(work, "rank.py"), stamps, f"{RANK_SLEEP:g}"]


def latest_stamp(stamps: str, n: int, timeout: float = 60.0) -> float:
    """The latest of the ``n`` rank timestamps (waits until all exist and are written)."""
    return max(wait_stamps(stamps, n, timeout=timeout))


def time_mslaunch(cluster, work: str, env: Dict[str, str]) -> float:
    stamps = tempfile.mkdtemp(dir=work)
    job = os.path.join(work, f"job-{os.path.basename(stamps)}")
    argv = [
        sys.executable,
        "-m",
        "launcher",
        "run",
        "-q",
        "--hosts",
        cluster.hostfile,
        "--per-host",
        "1",
        "--launcher",
        "ssh",
        "--master-port",
        "auto",
        "--log-dir",
        job,
        "--no-python",
        *rank_argv(work, stamps),
    ]
    start = time.time()
    proc = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"mslaunch failed: {proc.stderr[-2000:]}")
    return latest_stamp(stamps, len(cluster.hosts)) - start


def time_serial_ssh(cluster, work: str) -> float:
    stamps = tempfile.mkdtemp(dir=work)
    start = time.time()
    for rank, h in enumerate(cluster.hosts):
        inner = f"cd {shlex.quote(work)}; RANK_ID={rank} nohup {shlex.join(rank_argv(work, stamps))} >/dev/null 2>&1 </dev/null &"  # noqa: E501 - kept whole: a literal line as the program sees it
        subprocess.run(["ssh", "-F", cluster.ssh_config, h.name, inner], check=True, capture_output=True, timeout=60)
    t = latest_stamp(stamps, len(cluster.hosts)) - start
    time.sleep(RANK_SLEEP + 0.5)  # let the background ranks end by themselves
    return t


def measure(size: int, runs: int) -> Tuple[List[float], List[float]]:
    from tests.harness.netns_cluster import NamespaceCluster

    env = dict(os.environ)
    with NamespaceCluster(size, slots=1) as cluster, tempfile.TemporaryDirectory(prefix="mslbench-") as work:
        env["MSLAUNCH_SSH_CONFIG"] = cluster.ssh_config
        env["MSLAUNCH_HOME"] = os.path.join(work, "home")
        with open(os.path.join(work, "rank.py"), "w") as fh:
            fh.write(RANK_PROGRAM)
        time_mslaunch(cluster, work, env)  # warm-up (page cache, first sshd forks)
        ours, serial = [], []
        for _ in range(runs):
            ours.append(time_mslaunch(cluster, work, env))
            serial.append(time_serial_ssh(cluster, work))
        deadline = time.time() + 10
        while cluster.all_pids() and time.time() < deadline:
            time.sleep(0.1)
    return ours, serial


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1,2,4,8,16", help="host counts (comma-separated)")
    parser.add_argument("--runs", type=int, default=3, help="runs per size and method (median reported)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    exit_if_cannot_run()
    rows = []
    for size in sizes:
        ours, serial = measure(size, args.runs)
        rows.append((size, statistics.median(ours), statistics.median(serial), ours, serial))
        print(
            f"  {size:>2} host(s): mslaunch {statistics.median(ours):.3f} s  serial ssh "
            f"{statistics.median(serial):.3f} s",
            file=sys.stderr,
        )
    base = rows[0][1]
    print(f"time until every rank has started (1 rank per host, median of {args.runs}; s)")
    print(f"{'hosts':>5}  {'mslaunch':>9}  {'x 1-host':>8}  {'serial ssh':>10}  {'serial/mslaunch':>15}")
    for size, ours, serial, _, _ in rows:
        print(f"{size:>5}  {ours:>9.3f}  {ours / base:>8.2f}  {serial:>10.3f}  {serial / ours:>15.2f}")
    largest = rows[-1]
    ratio = largest[1] / base
    ok = ratio <= TARGET_RATIO or largest[0] != 16
    print(f"{largest[0]} hosts / 1 host = {ratio:.2f} (target <= {TARGET_RATIO:g}): {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
