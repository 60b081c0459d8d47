#!/usr/bin/env python3
"""Benchmark: the pre-flight health check (``doctor --health``) on namespace hosts.

One namespace cluster of 16 hosts (``tests/harness/netns_cluster.py``: one network namespace
and one sshd per "host"; needs root, ``ip netns`` and OpenSSH); the 4-host check uses its first
4 hosts.  Every host shares this machine's cores, so the compute kernels and transfers of all
hosts run at once on the same CPUs (real hosts each have their own).  Measured:

1. **time** of the whole check (connect, start, compute, both network rounds, clean-up) for 4
   and 16 hosts, median of ``--runs``; the ratio 16 / 4 and the 16-host time against the target
   (<= 20 s).
2. **spread** over ``--runs`` checks of the 16 healthy hosts: per host min / median / max of its
   compute (GFLOPS) and network (MB/s: its best transfer, round 2 included) figures, and per run
   the lowest host's figure as a fraction of the median the verdicts use (compute: the hosts'
   median; network: the median of round 1) -- slow is below 0.5; no healthy host may be called
   slow or faulty.
3. processes left on any host afterwards (0).

Usage::

    python bench/bench_health.py [--hosts 16] [--runs 5]

Exit code: 0 when every target is met, 1 otherwise, 2 when namespace clusters cannot run here.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import replace
from typing import Dict, List

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchkit import exit_if_cannot_run  # noqa: E402  (after sys.path is set above)

TARGET_16 = 20.0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=16)
    ap.add_argument("--small", type=int, default=4)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    exit_if_cannot_run()
    from launcher.execution.checks.health import run_health
    from launcher.execution.ssh.settings import SSHSettings
    from launcher.planning.inventory.sources import read_inventory
    from tests.harness.netns_cluster import NamespaceCluster

    ok = True
    with NamespaceCluster(args.hosts) as c:
        hosts = read_inventory(c.inventory_yaml).hosts
        python = {h.name: sys.executable for h in hosts}
        ssh = replace(SSHSettings(), config=c.ssh_config)
        times: Dict[int, List[float]] = {args.small: [], args.hosts: []}
        g: Dict[str, List[float]] = {h.name: [] for h in hosts}
        m: Dict[str, List[float]] = {h.name: [] for h in hosts}
        worst_g, worst_m, bad = [], [], []
        for _ in range(args.runs):  # interleaved: 4 hosts, then 16
            for n in (args.small, args.hosts):
                t0 = time.monotonic()
                res = run_health(hosts[:n], python, ssh)
                times[n].append(time.monotonic() - t0)
                if n != args.hosts:
                    continue
                bad += [v.line() for v in res.verdicts if not v.ok]
                for v in res.verdicts:
                    if v.gflops is not None:
                        g[v.host].append(v.gflops)
                    if v.mbps is not None:
                        m[v.host].append(v.mbps)
                gs = [v.gflops for v in res.verdicts if v.gflops is not None]
                worst_g.append(min(gs) / statistics.median(gs))
                # as the verdicts judge: a host's best transfer against the median of round 1
                first = [t.mbps for v in res.verdicts for t in v.transfers if t.round == 1]
                worst_m.append(min(v.mbps for v in res.verdicts if v.mbps is not None) / statistics.median(first))
        left = c.all_pids()
    t_small, t_big = statistics.median(times[args.small]), statistics.median(times[args.hosts])
    print(
        f"check time, median of {args.runs}: {args.small} hosts {t_small:.1f} s, {args.hosts} hosts {t_big:.1f} s "
        f"(ratio {t_big / t_small:.2f}; target <= {TARGET_16:g} s for 16: {'met' if t_big <= TARGET_16 else 'MISSED'})"
    )
    print(
        f"  all runs: {args.small}: {', '.join(f'{t:.1f}' for t in times[args.small])}; "
        f"{args.hosts}: {', '.join(f'{t:.1f}' for t in times[args.hosts])}"
    )
    print(f"spread over {args.runs} runs of {args.hosts} healthy hosts (min / median / max per host):")
    for h in g:
        gg, mm = g[h], m[h]
        print(
            f"  {h}: compute {min(gg):.1f} / {statistics.median(gg):.1f} / {max(gg):.1f} GFLOPS; "
            f"network {min(mm):.0f} / {statistics.median(mm):.0f} / {max(mm):.0f} MB/s"
        )
    print(
        f"lowest figure / median per run: compute {', '.join(f'{x:.2f}' for x in worst_g)}; "
        f"network {', '.join(f'{x:.2f}' for x in worst_m)} (slow below 0.5)"
    )
    print(f"healthy hosts called slow or faulty: {len(bad)}" + "".join(f"\n  {b}" for b in bad))
    print(f"processes left on the hosts: {sum(len(v) for v in left.values())}")
    ok = ok and t_big <= TARGET_16 and not bad and not left
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
