"""Benchmark: the first MindSpore job on a machine (empty CPU-probe cache) against a warm one.

Each round runs the same 2-rank MindSpore CPU job (``mslaunch run --np 2``; each rank stamps its
start, then imports MindSpore and joins the dynamic cluster with ``init()``) twice with one fresh
``$MSLAUNCH_HOME``: **first** (nothing cached) and **warm** (the same home again). Printed, per
round and as medians: the start (from ``mslaunch run`` to the last rank's first line) and the whole
job, and the ratio first / warm. Also timed in the same rounds: **the CPU probe alone**
(``launcher.execution.checks.cpu.cached_probe``, cache ignored), which a first job ran before its
ranks on every CPU until mslaunch learned to skip it where no ISA cap can change oneDNN's kernels
(then the first job's start was about warm + this).

Usage::

    python bench/bench_first_job.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Tuple

from benchkit import stamps_of

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROGRAM = """\
import os, time
if os.environ.get("MS_ROLE") == "MS_WORKER":
    with open(os.path.join(os.environ["STAMPS"], "rank_" + os.environ["RANK_ID"]), "w") as f:
        f.write(repr(time.time()))
import mindspore
from mindspore.communication import init
init()
"""


def run_job(home: str, work: str, name: str) -> Tuple[float, float, str]:
    """One ``mslaunch run --np 2`` with ``home``; (start s, job s, the cpu lines it printed)."""
    stamps = os.path.join(work, f"stamps-{name}")
    os.makedirs(stamps)
    env = dict(os.environ, MSLAUNCH_HOME=home, STAMPS=stamps, PYTHONPATH=ROOT)
    t0 = time.time()
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "launcher",
            "run",
            "--np",
            "2",
            "--master-port",
            "auto",
            "--tee",
            "none",
            "--log-dir",
            os.path.join(work, f"job-{name}"),
            os.path.join(work, "prog.py"),
        ],
        env=env,
        cwd=work,
        capture_output=True,
        text=True,
        timeout=600,
    )
    total = time.time() - t0
    if p.returncode != 0:
        raise RuntimeError(f"{name}: mslaunch exited {p.returncode}: {p.stderr[-2000:]}")
    values = stamps_of(stamps)
    if len(values) != 2:
        raise RuntimeError(f"{name}: {len(values)} of 2 ranks stamped their start")
    notes = "\n".join(
        line for line in p.stderr.splitlines() if line.startswith(("mslaunch: cpu:", "mslaunch: probing"))
    )
    return max(values) - t0, total, notes


def probe_alone(home: str) -> float:
    """The CPU probe as a first job used to run it (cache ignored); its wall seconds."""
    sys.path.insert(0, ROOT)
    from launcher.execution.checks.cpu import cached_probe, local_runner

    t0 = time.time()
    out = cached_probe(local_runner(sys.executable), home, socket.gethostname(), refresh=True)
    if out.probe is None:
        raise RuntimeError(f"the probe failed: {out.note}")
    return time.time() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    rows: Dict[str, List[float]] = {
        "first start": [],
        "warm start": [],
        "first job": [],
        "warm job": [],
        "probe alone": [],
    }
    notes = ""
    for r in range(args.rounds):
        work = tempfile.mkdtemp(prefix="bench-first-job-")
        try:
            with open(os.path.join(work, "prog.py"), "w") as f:
                f.write(PROGRAM)
            home = os.path.join(work, "home")
            s1, j1, notes = run_job(home, work, "first")
            s2, j2, _ = run_job(home, work, "warm")
            probe = probe_alone(os.path.join(work, "probe-home"))
        finally:
            shutil.rmtree(work, ignore_errors=True)
        for key, value in (
            ("first start", s1),
            ("warm start", s2),
            ("first job", j1),
            ("warm job", j2),
            ("probe alone", probe),
        ):
            rows[key].append(value)
        print(
            f"round {r + 1}: first start {s1:.2f} s (job {j1:.2f} s), warm start {s2:.2f} s (job {j2:.2f} s), "
            f"probe alone {probe:.2f} s",
            flush=True,
        )
    med = {k: statistics.median(v) for k, v in rows.items()}
    print(f"\nthe first job's cpu lines:\n{notes}\n")
    print(
        f"median start: first {med['first start']:.2f} s, warm {med['warm start']:.2f} s, "
        f"ratio first/warm {med['first start'] / med['warm start']:.2f}"
    )
    print(
        f"median job:   first {med['first job']:.2f} s, warm {med['warm job']:.2f} s, "
        f"ratio first/warm {med['first job'] / med['warm job']:.2f}"
    )
    print(
        "the CPU probe alone (what a first job ran before its ranks when it was not skipped): "
        f"{med['probe alone']:.2f} s; "
        f"(warm start + probe) / warm start = {(med['warm start'] + med['probe alone']) / med['warm start']:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
