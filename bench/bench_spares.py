#!/usr/bin/env python3
"""Benchmark: what a restart's re-plan on spare hosts costs (docs/spare-hosts.md).

Between two attempts the supervisor re-plans the job without a bad host
(:func:`launcher.planning.spares.replan`) and the runner rewrites ``plan.json`` and the artefacts
(:func:`launcher.execution.runner.write_plan_files`).  For 16 / 128 / 1024 hosts x 8 slots with
one host spare: the re-plan's time against the first plan of the same job (the anchor, measured
in the same run: ``build_plan``), and the time to write the job dir's files.  Medians of
``--runs``.

Usage: python bench/bench_spares.py [--runs 3] [--hosts 16,128,1024]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from launcher.execution.runner import write_plan_files  # noqa: E402  (after sys.path is set above)
from launcher.planning.build import build_plan  # noqa: E402  (after sys.path is set above)
from launcher.planning.inventory.hostfile import parse_hostfile  # noqa: E402  (after sys.path is set above)
from launcher.planning.job.spec import Exclusion, JobSpec  # noqa: E402  (after sys.path is set above)
from launcher.planning.spares import replan  # noqa: E402  (after sys.path is set above)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--hosts", default="16,128,1024")
    args = ap.parse_args()
    for hosts in (int(h) for h in args.hosts.split(",")):
        inv = parse_hostfile("".join(f"n{i} slots=8\n" for i in range(hosts)), "hosts.txt")
        work = tempfile.mkdtemp(prefix="bench-spares-")
        try:
            world = (hosts - 1) * 8  # the last host is spare
            spec = JobSpec(
                inventory=inv,
                program=("train.py",),
                python=sys.executable,
                cwd=work,
                job_dir=os.path.join(work, "job"),
                job_id="bench",
                np=world,
                launcher="ssh",
            )
            os.makedirs(spec.job_dir)
            first, again, write = [], [], []
            for _ in range(args.runs):
                t = time.perf_counter()
                build_plan(spec)
                first.append(time.perf_counter() - t)
                t = time.perf_counter()
                plan = replan(spec, [Exclusion("n1", "2 failures", "restart", 2)], world)
                again.append(time.perf_counter() - t)
                t = time.perf_counter()
                write_plan_files(plan)
                write.append(time.perf_counter() - t)
            f, a, w = (statistics.median(x) for x in (first, again, write))
            print(
                f"{hosts:5d} hosts, {world:5d} ranks: first plan {f * 1000:7.1f} ms, re-plan {a * 1000:7.1f} ms "
                f"(ratio {a / f:.2f}), plan.json + artefacts {w * 1000:7.1f} ms"
            )
        finally:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
