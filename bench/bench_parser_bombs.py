"""Worst inputs of the planning parsers: time, CPU time and peak RSS of each, against an anchor.

Each case of ``tests/planning/test_parser_bounds.py`` runs in its own interpreter (as there); the anchor
is the same harness parsing an ordinary cluster file (``hostfiles/ascend_2x8.yaml``) in the same
run, so interpreter start-up and machine load hit both sides.  Targets (issue 8): every case
ends with a result or a one-line error in <= 2 s and <= 200 MB peak RSS.

Usage: python bench/bench_parser_bombs.py [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.planning.test_parser_bounds import CHILD, EXPECTED  # noqa: E402  (after sys.path is set above)

ANCHOR = "anchor-ascend_2x8.yaml"
ANCHOR_CHILD = CHILD.replace(
    "CASES = {",
    'CASES = {"%s": lambda: inventory.read_inventory(os.path.join(%r, "hostfiles", "ascend_2x8.yaml")),'
    % (ANCHOR, ROOT),
    1,
)


def run(case: str) -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT)
    r = subprocess.run([sys.executable, "-c", ANCHOR_CHILD, case], capture_output=True, text=True, env=env, timeout=300)
    if r.returncode != 0:
        return {
            "seconds": float("nan"),
            "cpu_seconds": float("nan"),
            "maxrss_mb": float("nan"),
            "error": r.stderr.strip()[-200:],
        }
    return json.loads(r.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    cases = [ANCHOR] + sorted(EXPECTED)
    results = {c: [] for c in cases}
    for _ in range(args.runs):
        for case in cases:  # interleaved: load hits every case alike
            results[case].append(run(case))
    anchor_cpu = statistics.median(r["cpu_seconds"] for r in results[ANCHOR]) or 1e-3
    print(f"{'case':28s} {'wall s':>8s} {'cpu s':>8s} {'cpu/anchor':>10s} {'peak MB':>8s}  outcome")
    worst_wall = worst_rss = 0.0
    for case in cases:
        rs = results[case]
        wall = statistics.median(r["seconds"] for r in rs)
        cpu = statistics.median(r["cpu_seconds"] for r in rs)
        rss = max(r["maxrss_mb"] for r in rs)
        outcome = "ok" if "ok" in rs[0] else rs[0].get("error", "")[-60:]
        print(f"{case:28s} {wall:8.3f} {cpu:8.3f} {cpu / anchor_cpu:10.1f} {rss:8.1f}  {outcome}")
        if case != ANCHOR:
            worst_wall, worst_rss = max(worst_wall, wall), max(worst_rss, rss)
    print(
        f"anchor (ordinary cluster file) cpu: {anchor_cpu:.3f} s; worst case: wall {worst_wall:.3f} s (target <= 2), "
        f"peak RSS {worst_rss:.1f} MB (target <= 200, interpreter included)"
    )


if __name__ == "__main__":
    main()
