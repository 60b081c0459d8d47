#!/usr/bin/env python3
"""Benchmark: ``mslaunch ranktable gen`` for a 512-host x 8-device cluster, as a whole process.

Builds a hostfile and a folder of hccn.conf copies in a temporary folder, then times (wall clock)
alternating runs of

* ``python -c pass``                      (interpreter start-up: the anchor),
* ``python -c 'import launcher'``         (package import),
* ``python -m launcher ranktable gen --hosts H --hccn-dir D -o OUT`` (the real thing),

and prints the median and min of each, the ratio to the anchor, and whether gen meets the
target (median <= 1.0 s).  ``--importtime`` also prints the slowest imports of the gen path
(``python -X importtime``).

Usage::

    python bench/bench_ranktable.py [--hosts 512] [--runs 7] [--importtime]

Exit code: 0 when the target is met, 1 otherwise.
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

TARGET_S = 1.0
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def make_cluster(folder: str, hosts: int, devices: int = 8) -> Tuple[str, str]:
    """Write ``hosts`` (one ``node<i> slots=8`` line per host) and ``hccn/<host>.conf`` files."""
    hccn = os.path.join(folder, "hccn")
    os.makedirs(hccn)
    names = [f"node{i:04d}" for i in range(hosts)]
    hostfile = os.path.join(folder, "hosts")
    with open(hostfile, "w", encoding="utf-8") as fh:
        fh.write("".join(f"{name} slots={devices}\n" for name in names))
    for i, name in enumerate(names):
        lines = []
        for d in range(devices):
            lines.append(f"address_{d}=10.{d}.{i // 256}.{i % 256}")
            lines.append(f"netmask_{d}=255.255.0.0")
            lines.append(f"netdetect_{d}=10.{d}.0.1")
        with open(os.path.join(hccn, f"{name}.conf"), "w", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")
    return hostfile, hccn


def run_once(argv: Sequence[str], env: Dict[str, str]) -> float:
    """Wall time of one run; raises if the command fails."""
    start = time.perf_counter()
    proc = subprocess.run(list(argv), cwd=ROOT, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"command failed ({proc.returncode}): {' '.join(argv)}\n{proc.stderr}")
    return elapsed


def import_profile(argv: Sequence[str], env: Dict[str, str], top: int = 12) -> List[Tuple[int, str]]:
    """The ``top`` imports with the largest cumulative time (us) in one ``-X importtime`` run."""
    proc = subprocess.run([argv[0], "-X", "importtime", *argv[1:]], cwd=ROOT, env=env, capture_output=True, text=True)
    rows = []
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        parts = line.split("|")
        try:
            rows.append((int(parts[1]), parts[2].rstrip()))
        except (IndexError, ValueError):
            continue
    return sorted(rows, reverse=True)[:top]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=512)
    parser.add_argument("--runs", type=int, default=7, help="runs per command (>= 5)")
    parser.add_argument("--importtime", action="store_true", help="also print the slowest imports of gen")
    parser.add_argument(
        "--no-bytecode",
        action="store_true",
        help="keep PYTHONDONTWRITEBYTECODE as inherited (every run recompiles mslaunch's modules)",
    )
    args = parser.parse_args()
    runs = max(5, args.runs)
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")

    with tempfile.TemporaryDirectory(prefix="bench_ranktable_") as tmp:
        if not args.no_bytecode:
            # Measure what an installed mslaunch sees: cached bytecode.  The cache lives in the
            # temporary folder, so the source tree gets no __pycache__ folders.
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = os.path.join(tmp, "pycache")
        bytecode = "off (PYTHONDONTWRITEBYTECODE)" if env.get("PYTHONDONTWRITEBYTECODE") else "cached"
        hostfile, hccn = make_cluster(tmp, args.hosts)
        out = os.path.join(tmp, "rank_table.json")
        py = sys.executable
        commands = {
            "python -c pass": [py, "-c", "pass"],
            "python -c 'import launcher'": [py, "-c", "import launcher"],
            "mslaunch ranktable gen": [
                py,
                "-m",
                "launcher",
                "ranktable",
                "gen",
                "--hosts",
                hostfile,
                "--hccn-dir",
                hccn,
                "-o",
                out,
            ],
        }
        times: Dict[str, List[float]] = {name: [] for name in commands}
        for name, argv in commands.items():  # warm-up (page cache, .pyc files)
            run_once(argv, env)
        for _ in range(runs):
            for name, argv in commands.items():
                times[name].append(run_once(argv, env))

        with open(out, encoding="utf-8") as fh:
            table = json.load(fh)
        ranks = sum(len(s["device"]) for s in table["server_list"])
        size = os.path.getsize(out)

        anchor = statistics.median(times["python -c pass"])
        print(
            f"rank table: {len(table['server_list'])} servers, {ranks} ranks, {size / 1024:.0f} KiB; "
            f"{runs} alternating runs each; bytecode {bytecode}; {sys.version.split()[0]}"
        )
        print(f"{'command':<30} {'median s':>9} {'min s':>7} {'x anchor':>9}")
        for name, values in times.items():
            med = statistics.median(values)
            print(f"{name:<30} {med:>9.3f} {min(values):>7.3f} {med / anchor:>9.1f}")
        gen = statistics.median(times["mslaunch ranktable gen"])
        start_up = statistics.median(times["python -c 'import launcher'"])
        print(f"gen / python -c pass = {gen / anchor:.1f}x; gen minus 'import launcher' = {gen - start_up:.3f} s")
        ok = gen <= TARGET_S
        print(f"target: gen median <= {TARGET_S:.1f} s: {'met' if ok else 'NOT met'} ({gen:.3f} s)")

        if args.importtime:
            print("\nslowest imports of the gen path (cumulative us):")
            for us, name in import_profile(commands["mslaunch ranktable gen"], env):
                print(f"  {us:>8}  {name.strip()}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
