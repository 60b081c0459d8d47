#!/usr/bin/env python3
"""The straggler watch on healthy jobs: every job a test-suite run left, read back.

``make test`` runs a few hundred jobs of 2 to 8 ranks (local, ssh, mpirun, Slurm; MindSpore and
stand-ins) on 2 shared cores under a load of 4 to 11, every one with the default ``--straggler
warn`` (a 30 s window) or the window its test sets: a large sample of healthy, noisy jobs.  This
reads each job folder under FOLDER (default: the newest ``/tmp/pytest-of-$USER/pytest-N``, pytest's
folder of the last run) and prints:

* how many jobs, how many of them with 2 ranks or more, their wall time, and the watch's
  judgements (``summary.json``'s ``straggler_watch.looks``) in them;
* every ``straggler`` event, split by whether its test injected a fault (its folder name matches
  ``--injected``: pytest names a test's folder after the test, cut to 30 characters), and the
  others, each with its folder and evidence.

A named rank in a job whose test injected nothing is a false positive (or a fault nobody meant:
read its evidence).  Exit 1 when there is one.

Usage: python bench/bench_straggler_quiet.py [FOLDER ...] [--injected REGEX]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys
from typing import Any, Dict, List

#: Larger events files are a test's on purpose (parser bombs), not a job's.
MAX_BYTES = 16 << 20
#: Folder names of the tests that inject a fault (a CPU quota, a shaped or cut link, a lost host, a
#: killed, stopped or hung rank, a preemption): a rank named there may be what the test did.
INJECTED = (
    r"quota|shaped|slow|straggl|replace|under_a|throttl|link|cut|lost|fault|kill|stop|hang|hung|preempt|fail|"
    r"dies|down|blocked|timeout|stalled|sigint|sigterm"
)


def newest_pytest_folder() -> str:
    """The newest folder of a ``make test`` run (its workers' ``popen-gwN`` folders; the suite also
    runs pytest inside some tests, whose folders come later), else the newest."""
    user = os.environ.get("USER") or "root"
    found = sorted(glob.glob(f"/tmp/pytest-of-{user}/pytest-[0-9]*"), key=os.path.getmtime)
    if not found:
        sys.exit(f"bench_straggler_quiet: no /tmp/pytest-of-{user}/pytest-N folder: run the tests first, or name one")
    suites = [f for f in found if glob.glob(os.path.join(f, "popen-gw*"))]
    return (suites or found)[-1]


def read_jobs(folder: str) -> List[Dict[str, Any]]:
    jobs, seen = [], set()
    found = [
        os.path.join(top, "events.jsonl")
        for top, _dirs, files in os.walk(folder)  # not into links: tests make link loops and links out on purpose
        if "events.jsonl" in files
    ]
    for path in found:
        job = os.path.dirname(path)
        if not os.path.isfile(path) or os.path.getsize(path) > MAX_BYTES:  # a link, or a test's giant
            continue
        if os.path.realpath(job) in seen:  # pytest's <name>current links point at folders read already
            continue
        seen.add(os.path.realpath(job))
        parts = os.path.relpath(job, folder).split(os.sep)
        try:
            with open(path) as fh:
                events = [e for e in (json.loads(line) for line in fh if line.strip()) if isinstance(e, dict)]
        except (OSError, ValueError, RecursionError):
            continue  # some tests write files that are not a job's on purpose (parser bombs too)
        summary: Any = {}
        try:
            if not os.path.isfile(os.path.join(job, "summary.json")):  # a FIFO would block the read
                raise OSError("not a file")
            with open(os.path.join(job, "summary.json")) as fh:
                summary = json.load(fh)
        except (OSError, ValueError, RecursionError):
            pass
        watch = summary.get("straggler_watch") if isinstance(summary, dict) else None
        ranks = {e.get("rank") for e in events if e.get("kind") == "started" and e.get("rank") is not None}
        times = [e["time"] for e in events if isinstance(e.get("time"), (int, float))]
        jobs.append(
            {
                "job": job,
                "test": next((p for p in parts if p.startswith("test")), job),
                "ranks": len(ranks),
                "seconds": (max(times) - min(times)) if times else 0.0,
                "looks": int(watch.get("looks") or 0) if isinstance(watch, dict) else 0,
                "named": [e for e in events if e.get("kind") == "straggler" and not e.get("cleared")],
            }
        )
    return jobs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="*")
    ap.add_argument("--injected", default=INJECTED, help="regex of the folders of tests that inject faults")
    args = ap.parse_args()
    folders = args.folders or [newest_pytest_folder()]
    injected = re.compile(args.injected)
    jobs = [j for f in folders for j in read_jobs(f)]
    multi = [j for j in jobs if j["ranks"] >= 2]
    healthy = [j for j in multi if not injected.search(j["test"])]
    print(f"folders: {', '.join(folders)}")
    print(
        f"{len(jobs)} jobs, {len(multi)} of 2 ranks or more ({sum(j['seconds'] for j in multi) / 60:.1f} min of "
        f"wall time, {sum(j['looks'] for j in multi)} judgements); of these {len(healthy)} with nothing injected "
        f"({sum(j['seconds'] * j['ranks'] for j in healthy) / 60:.1f} rank-minutes, "
        f"{sum(j['looks'] for j in healthy)} judgements)"
    )
    false = [(j, e) for j in healthy for e in j["named"]]
    meant = [(j, e) for j in multi if injected.search(j["test"]) for e in j["named"]]
    print(f"named in jobs whose test injected a fault: {len(meant)}")
    for j, e in meant:
        print(f"  {j['test']}: {e.get('evidence')}")
    print(f"named in jobs with nothing injected: {len(false)}")
    for j, e in false:
        print(f"  {j['job']}: {e.get('evidence')}")
    return 1 if false else 0


if __name__ == "__main__":
    sys.exit(main())
