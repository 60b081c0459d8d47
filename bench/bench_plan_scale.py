#!/usr/bin/env python3
"""Benchmark: planning and rank tables at scale, as whole processes (issue 12, linear planning).

In one run, alternating the cases so machine load hits them alike, it times (wall clock, median)

* ``mslaunch plan`` (the summary) and ``mslaunch plan --json`` (every rank, to a file) for
  1k/2k/4k/10k hosts x 8 slots, from a YAML cluster file and from an OpenMPI hostfile,
  and for 10 hosts (the anchor: start-up and imports, the part that does not grow);
* ``mslaunch ranktable gen`` / ``validate`` / ``show`` for 4,096 servers x 8 devices (v1.0
  from a hostfile and hccn.conf copies, v1.2 from a YAML file with inline device IPs),

and prints, per inventory kind, the per-host cost ``(t(N) - t(10)) / (N - 10)`` and the ratio of
that cost at 10k to the one at 1k (1.0 = linear growth; a quadratic planner gives ~10), beside
the targets: plan for 10k x 8 <= 2 s, each rank-table command for 4,096 servers <= 2 s.  The
anchors: ``plan`` of 10 hosts (start-up and imports of the whole CLI) and ``ranktable validate``
of a one-server table (start-up of the rank-table commands, which skip the others' imports).

``--baseline DIR`` also runs every case from another checkout of the project (e.g. the commit
before a change: ``git archive REV launcher bench | tar -x -C DIR``), alternating with this one,
and prints both medians and their ratio per case: on a shared machine, a before/after that
load hits alike.

Usage: python bench/bench_plan_scale.py [--runs 3] [--sizes 1000,2000,4000,10000] [--baseline DIR]
Exit code: 0 when every target is met (by this checkout), 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Sequence, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

from bench_ranktable import make_cluster  # noqa: E402  (after sys.path is set above)

TARGET_PLAN_S = 2.0
TARGET_TABLE_S = 2.0
ANCHOR_HOSTS = 10


def write_inventories(folder: str, hosts: int) -> Dict[str, str]:
    """A hostfile and a YAML cluster file of ``hosts`` hosts x 8 slots."""
    names = [f"node{i:05d}" for i in range(hosts)]
    txt = os.path.join(folder, f"hosts_{hosts}.txt")
    with open(txt, "w", encoding="utf-8") as fh:
        fh.write("".join(f"{n} slots=8\n" for n in names))
    yml = os.path.join(folder, f"cluster_{hosts}.yaml")
    with open(yml, "w", encoding="utf-8") as fh:
        fh.write("defaults:\n  slots: 8\nhosts:\n" + "".join(f"  - host: {n}\n" for n in names))
    return {"hostfile": txt, "yaml": yml}


def write_a3_yaml(folder: str, servers: int) -> str:
    """A v1.2 (Atlas A3) cluster file: ``servers`` x 8 devices, 64 servers per SuperPoD."""
    path = os.path.join(folder, "a3.yaml")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("defaults:\n  slots: 8\nhosts:\n")
        for i in range(servers):
            ips = ", ".join(f"{d}: 10.{d}.{i // 256}.{i % 256}" for d in range(8))
            sdids = ", ".join(f"{d}: '{i * 8 + d}'" for d in range(8))
            fh.write(
                f"  - host: node{i:04d}\n    host_ip: 192.168.{i // 256}.{i % 256}\n    super_pod_id: '{i // 64}'\n"
                f"    device_ips: {{{ips}}}\n    super_device_ids: {{{sdids}}}\n"
            )
    return path


def run_once(argv: Sequence[str], env: Dict[str, str], cwd: str) -> float:
    """Wall time of one run with stdout to /dev/null (a file for --json); raises if it fails."""
    start = time.perf_counter()
    with open(os.devnull, "w") as null:
        proc = subprocess.run(list(argv), cwd=cwd, env=env, stdout=null, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"command failed ({proc.returncode}): {' '.join(argv)}\n{proc.stderr}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sizes", default="1000,2000,4000,10000")
    parser.add_argument("--baseline", metavar="DIR", help="another checkout to run every case from too, alternating")
    args = parser.parse_args()
    sizes = [ANCHOR_HOSTS] + [int(s) for s in args.sizes.split(",")]
    py = sys.executable
    ok = True
    with tempfile.TemporaryDirectory(prefix="bench_plan_scale_") as tmp:
        trees = {"this": ROOT} if not args.baseline else {"this": ROOT, "baseline": os.path.abspath(args.baseline)}
        envs: Dict[str, Dict[str, str]] = {}
        for label, tree in trees.items():
            env = dict(os.environ)
            env["PYTHONPATH"] = tree + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = os.path.join(tmp, "pycache", label)
            envs[label] = env
        cases: Dict[str, List[str]] = {}
        for n in sizes:
            for kind, path in write_inventories(tmp, n).items():
                base = [py, "-m", "launcher", "plan", "--hosts", path, "--job-id", "bench"]
                cases[f"plan {kind} {n}"] = base + ["--", "train.py"]
                cases[f"plan --json {kind} {n}"] = base + ["--json", "--", "train.py"]
        hostfile, hccn = make_cluster(tmp, 4096)
        a3 = write_a3_yaml(tmp, 4096)
        t1 = write_one_server_table(tmp)
        rt = [py, "-m", "launcher", "ranktable"]
        table_cases: Dict[str, List[str]] = {}
        for label in trees:  # each checkout reads the tables it wrote
            t10, t12 = os.path.join(tmp, f"t10-{label}.json"), os.path.join(tmp, f"t12-{label}.json")
            table_cases.update(
                {
                    f"ranktable gen 1.0@{label}": rt + ["gen", "--hosts", hostfile, "--hccn-dir", hccn, "-o", t10],
                    f"ranktable gen 1.2@{label}": rt + ["gen", "--hosts", a3, "--version", "1.2", "-o", t12],
                    f"ranktable validate 1.0@{label}": rt + ["validate", t10],
                    f"ranktable validate 1.2@{label}": rt + ["validate", t12],
                    f"ranktable show 1.0@{label}": rt + ["show", t10],
                    f"ranktable show 1.2@{label}": rt + ["show", t12],
                    f"ranktable show --all 1.2@{label}": rt + ["show", "--all", t12],
                }
            )
        runs: Dict[str, Tuple[List[str], Dict[str, str]]] = {}
        per_tree: List[List[str]] = []
        for label in trees:
            mine = {f"{name}@{label}": argv for name, argv in cases.items()}
            mine[f"{RT_ANCHOR}@{label}"] = rt + ["validate", t1]
            mine.update({name: argv for name, argv in table_cases.items() if name.endswith("@" + label)})
            runs.update({name: (argv, envs[label]) for name, argv in mine.items()})
            per_tree.append(list(mine))
        order = [name for same_case in zip(*per_tree) for name in same_case]  # this, baseline, next case...
        times: Dict[str, List[float]] = {name: [] for name in runs}
        for name in order:  # warm-up; gen also writes the tables the others read
            run_once(runs[name][0], runs[name][1], tmp)
        for _ in range(args.runs):
            for name in order:  # both checkouts' runs of a case next to each other
                times[name].append(run_once(runs[name][0], runs[name][1], tmp))
    med = {name: statistics.median(v) for name, v in times.items()}
    ok = report(med, sizes, "this", args.runs)
    if args.baseline:
        print(f"\nbaseline {args.baseline} (same run, alternating):")
        report(med, sizes, "baseline", args.runs)
        print("\nbefore/after, same run (median s; ratio this/baseline):")
        names = [n.rsplit("@", 1)[0] for n in order if n.endswith("@this")]
        for name in names:
            before, after = med[f"{name}@baseline"], med[f"{name}@this"]
            print(f"  {name:<28} {before:6.2f} -> {after:6.2f}  ({after / before:.2f})")
    return 0 if ok else 1


RT_ANCHOR = "ranktable validate 1 server"


def write_one_server_table(folder: str) -> str:
    """A valid one-server, 8-device v1.0 rank table (the rank-table commands' anchor)."""
    path = os.path.join(folder, "t1.json")
    devices = [
        {"device_id": str(d), "device_ip": f"192.{d % 4 + 1}.0.{d // 4 + 1}", "rank_id": str(d)} for d in range(8)
    ]
    table = {
        "version": "1.0",
        "server_count": "1",
        "server_list": [{"server_id": "node0", "device": devices, "host_nic_ip": "reserve"}],
        "status": "completed",
    }
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(table, fh)
    return path


def report(med: Dict[str, float], sizes: List[int], label: str, runs: int) -> bool:
    """Print the figures of one checkout (``label``) and whether it meets every target."""
    ok = True
    m = {name.rsplit("@", 1)[0]: t for name, t in med.items() if name.endswith("@" + label)}
    print(
        f"{runs} alternating runs per case, median wall s, whole process; {os.cpu_count()} CPUs "
        f"(machine possibly shared: compare within this run)"
    )
    print(f"{'hosts x 8':>10} {'ranks':>7} | {'yaml':>6} {'yaml --json':>11} | {'hostfile':>8} {'hostfile --json':>15}")
    for n in sizes:
        print(
            f"{n:>10} {8 * n:>7} | {m[f'plan yaml {n}']:>6.2f} {m[f'plan --json yaml {n}']:>11.2f} | "
            f"{m[f'plan hostfile {n}']:>8.2f} {m[f'plan --json hostfile {n}']:>15.2f}"
        )
    small, big = sizes[1], sizes[-1]
    for kind in ("yaml", "hostfile"):
        for flag in ("", "--json "):
            anchor = m[f"plan {flag}{kind} {ANCHOR_HOSTS}"]
            per_small = (m[f"plan {flag}{kind} {small}"] - anchor) / (small - ANCHOR_HOSTS)
            per_big = (m[f"plan {flag}{kind} {big}"] - anchor) / (big - ANCHOR_HOSTS)
            ratio = per_big / per_small if per_small > 0 else float("nan")
            print(
                f"plan {flag}{kind}: per-host cost {per_small * 1e6:.0f} us at {small}, {per_big * 1e6:.0f} us at "
                f"{big} "
                f"(anchor {anchor:.2f} s at {ANCHOR_HOSTS} hosts): ratio {ratio:.2f} (1.0 = linear)"
            )
    for kind in ("yaml", "hostfile"):
        t = m[f"plan {kind} {big}"]
        met = t <= TARGET_PLAN_S
        ok &= met
        print(
            f"target plan {kind} {big} x 8 <= {TARGET_PLAN_S:.1f} s: {'met' if met else 'NOT met'} ({t:.2f} s; "
            f"--json, {8 * big} ranks in full: {m[f'plan --json {kind} {big}']:.2f} s)"
        )
    print(f"rank tables, 4,096 servers x 8 devices (anchor: {RT_ANCHOR} {m[RT_ANCHOR]:.2f} s):")
    for name in [n for n in m if n.startswith("ranktable ") and n != RT_ANCHOR]:
        met = m[name] <= TARGET_TABLE_S
        ok &= met or "--all" in name
        print(
            f"  {name:<26} {m[name]:6.2f} s  {'met' if met else 'NOT met'} (target <= {TARGET_TABLE_S:.1f} s"
            f"{'; not a target' if '--all' in name else ''})"
        )
    return ok


if __name__ == "__main__":
    sys.exit(main())
