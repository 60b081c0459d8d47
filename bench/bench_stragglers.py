#!/usr/bin/env python3
"""Straggler bench: the signal on healthy noisy jobs, the time from a slowdown to the event, and
what watching costs.

Every job is 3 local ranks of ``tests/scripts/dploop.py`` (compute, then a TCP barrier) run with
``--straggler warn:WINDOW``.  Beside mslaunch's own watch, the bench samples every rank's tree
itself each second (:class:`launcher.execution.process.proctree.SchedCounter`) and records each
window's starvation shares, so the margins of the rule can be read off:

* ``healthy``: RUNS jobs of SECONDS each beside HOGS busy loops (a noisy machine): every
  window's shares, the highest share and the highest ratio of one rank's odds to the others'
  median odds (the rule names at >= 4 with a share >= 0.5, three judgements in a row), and the
  straggler events (there should be none);
* ``slow``: RUNS jobs whose rank 1 is put under a CPU quota (QUOTA us per 100 ms, cgroup v1) after
  a few seconds: the seconds from the quota to the ``straggler`` event, the shares then;
* cost: the watch's CPU seconds (``summary.json`` ``straggler_watch``) per minute against the
  ranks' CPU seconds, and one :meth:`SchedCounter.sample` of a process with 64 threads.

Usage::

    python bench/bench_stragglers.py [--runs 3] [--seconds 40] [--hogs 2] [--window 6] [--quota 3000] [--no-slow]

Needs root and the cgroup v1 cpu controller for ``slow``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from typing import Any, Dict, List, Tuple

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)

from benchkit import job_events  # noqa: E402  (after sys.path is set above)

from launcher.execution.process.proctree import SchedCounter  # noqa: E402
from tests.harness.cli import mslaunch_argv  # noqa: E402

DPLOOP = os.path.join(HERE, "tests", "scripts", "dploop.py")
CPU_ROOT = "/sys/fs/cgroup/cpu"


def _odds(s: float) -> float:
    return s / (1 - s) if s < 1 else float("inf")


def run_job(folder: str, seconds: float, hogs: int, window: float, quota: int) -> Dict[str, Any]:
    """One job; returns its windows' shares, the straggler events, timings and costs."""
    job, stop = os.path.join(folder, "job"), os.path.join(folder, "stop")
    argv = mslaunch_argv(
        "run", "--np", "3", "--master-port", "auto", "--log-dir", job, "--tee", "none",
        "--straggler", f"warn:{window:g}", "--no-python", sys.executable, DPLOOP, "150000", stop,
    )  # fmt: skip
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(hogs)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    group = os.path.join(CPU_ROOT, f"mslaunch-bench-straggler-{os.getpid()}")
    out: Dict[str, Any] = {"windows": [], "events": [], "named_after": None}
    try:
        deadline = time.monotonic() + 60
        pids: Dict[int, int] = {}
        while len(pids) < 3 and time.monotonic() < deadline:
            pids = {e["rank"]: e["pid"] for e in job_events(job) if e["kind"] == "started" and e["rank"] is not None}
            time.sleep(0.2)
        counters = {r: SchedCounter() for r in pids}
        hist: Dict[int, List[Tuple[float, float, float]]] = {r: [] for r in pids}
        t0 = time.monotonic()
        throttled_at = None
        while time.monotonic() - t0 < seconds:
            time.sleep(1.0)
            now = time.monotonic()
            for r, pid in pids.items():
                got = counters[r].read(pid)
                if got is not None:
                    hist[r].append((now, got[0], got[1]))
            shares = {}
            for r, h in hist.items():
                old = [x for x in h if x[0] <= now - window]
                if old and h:
                    a, b = old[-1], h[-1]
                    run = (b[1] - a[1]) + (b[2] - a[2])
                    shares[r] = (b[2] - a[2]) / run if run > 0 else 0.0
            if len(shares) == 3:
                out["windows"].append((round(now - t0, 1), shares, throttled_at is not None))
            if quota and throttled_at is None and now - t0 >= seconds / 3:
                os.makedirs(group, exist_ok=True)
                with open(os.path.join(group, "cpu.cfs_quota_us"), "w") as fh:
                    fh.write(str(quota))
                with open(os.path.join(group, "cgroup.procs"), "w") as fh:
                    fh.write(str(pids[1]))
                throttled_at = time.time()
            named = [e for e in job_events(job) if e["kind"] == "straggler"]
            if throttled_at is not None and named and out["named_after"] is None:
                out["named_after"] = named[0]["since"] - throttled_at
                out["deadline"] = time.monotonic() + 2 * window  # a few windows more of shares
            if out.get("deadline") and time.monotonic() > out["deadline"]:
                break
        out["events"] = [e for e in job_events(job) if e["kind"] == "straggler"]
        out["rank_cpu_s"] = sum(h[-1][1] for h in hist.values() if h)
        out["elapsed_s"] = time.monotonic() - t0
    finally:
        for b in busy:
            b.kill()
            b.wait()
        if os.path.isdir(group):
            with open(os.path.join(group, "cgroup.procs")) as fh:
                for pid in fh.read().split():
                    try:
                        with open(os.path.join(CPU_ROOT, "cgroup.procs"), "w") as root:
                            root.write(pid)
                    except OSError:
                        pass
            os.rmdir(group)
        open(stop, "w").close()
        proc.wait(timeout=120)
    with open(os.path.join(job, "summary.json")) as fh:
        out["watch"] = json.load(fh).get("straggler_watch")
    return out


def read_cost(threads: int = 64, reads: int = 200) -> float:
    """Microseconds of CPU per :meth:`SchedCounter.sample` (the scheduler figures of every thread
    and the TCP send queues) of a process with ``threads`` threads."""
    stop = threading.Event()
    pool = [threading.Thread(target=stop.wait, daemon=True) for _ in range(threads - 1)]
    for t in pool:
        t.start()
    c = SchedCounter()
    started = time.thread_time()
    for _ in range(reads):
        c.sample(os.getpid())
    cost = (time.thread_time() - started) / reads * 1e6
    stop.set()
    return cost


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=40)
    ap.add_argument("--hogs", type=int, default=2)
    ap.add_argument("--window", type=float, default=6)
    ap.add_argument("--quota", type=int, default=3000)
    ap.add_argument("--folder", default=f"/tmp/bench-stragglers-{os.getpid()}")
    ap.add_argument("--no-slow", action="store_true", help="healthy runs only")
    a = ap.parse_args()
    print(f"SchedCounter.sample of a 64-thread process: {read_cost():.0f} us of CPU")
    healthy_max_share, healthy_max_ratio, false_named = 0.0, 0.0, 0
    watch_cpu, rank_cpu, minutes = 0.0, 0.0, 0.0
    for i in range(a.runs):
        res = run_job(os.path.join(a.folder, f"healthy{i}"), a.seconds, a.hogs, a.window, 0)
        shares = [s for _, w, _ in res["windows"] for s in w.values()]
        ratios = [
            _odds(w[r]) / max(1e-9, _odds(statistics.median([w[o] for o in w if o != r])))
            for _, w, _ in res["windows"]
            for r in w
        ]
        healthy_max_share = max([healthy_max_share, *shares])
        healthy_max_ratio = max([healthy_max_ratio, *ratios])
        false_named += len(res["events"])
        watch_cpu += res["watch"]["cpu_s"]
        rank_cpu += res["rank_cpu_s"]
        minutes += res["elapsed_s"] / 60
        print(
            f"healthy {i}: {len(res['windows'])} windows, shares {min(shares):.2f}-{max(shares):.2f} "
            f"(median {statistics.median(shares):.2f}), highest odds ratio {max(ratios):.2f}, "
            f"named {len(res['events'])}; watch {res['watch']}"
        )
    print(
        f"healthy: highest share {healthy_max_share:.2f}, highest odds ratio {healthy_max_ratio:.2f}, "
        f"named {false_named}"
    )
    print(
        f"cost: the watch {watch_cpu / minutes:.3f} CPU s per minute; "
        f"the ranks {rank_cpu / minutes:.1f} CPU s per minute "
        f"({100 * watch_cpu / max(rank_cpu, 1e-9):.2f} %)"
    )
    if a.no_slow:
        return 0
    if not os.path.exists(os.path.join(CPU_ROOT, "cpu.cfs_quota_us")):
        print("slow: skipped (no cgroup v1 cpu controller)")
        return 0
    times = []
    for i in range(a.runs):
        res = run_job(os.path.join(a.folder, f"slow{i}"), a.seconds, a.hogs, a.window, a.quota)
        after = [w for _, w, thr in res["windows"] if thr][-3:]
        took = res["named_after"] if res["named_after"] is None else round(res["named_after"], 1)
        last = [{r: round(s, 2) for r, s in w.items()} for w in after]
        print(
            f"slow {i}: named after {took} s; last shares {last}; events {[e['evidence'] for e in res['events']][:1]}"
        )
        if res["named_after"] is not None:
            times.append(res["named_after"])
    if times:
        print(
            f"slow: named after {min(times):.1f}-{max(times):.1f} s (window {a.window:g} s) "
            f"in {len(times)}/{a.runs} runs"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
