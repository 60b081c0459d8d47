"""Reliability of the default start path against ``--no-zygote`` and msrun, in one run.

(a) an 8-worker data-parallel job started with msrun's own flags (``--worker_num=8
    --local_worker_num=8 --master_port=P --log_dir=D --join=True --cluster_time_out=300``) on
    ``tests/scripts/dp_train.py`` (``TrainOneStepCell`` under ``DATA_PARALLEL``: the gradient
    AllReduce of ``DistributedGradReducer``, 10 epochs, 8 workers on this machine's cores);
(b) the 2-worker AllReduce (``launcher/workloads/allreduce_smoke.py``).

Each round runs every path back to back (the order rotates between rounds, so the machine's load
hits all of them); a run counts as a failure unless it exits 0 *and* every worker's log has its
result line.  Every failure is printed with its exit code and the last error line of its logs.
At the end, per path: failures / runs, the median time and its ratio to msrun's median (the
speed targets: (a) <= 0.70, (b) <= 0.55 for the default).  ``--minutes`` stops starting new
rounds after that long (the counts then say how many ran).

Usage: python bench/bench_reliability.py [--runs 100] [--only a|b] [--paths default,no-zygote,msrun] [--minutes M]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable
BIN = os.path.dirname(PY)
DP = os.path.join(ROOT, "tests", "scripts", "dp_train.py")
SMOKE = os.path.join(ROOT, "launcher", "workloads", "allreduce_smoke.py")
#: The paths: name -> how a run is started (None: msrun itself).
PATHS: Dict[str, Optional[List[str]]] = {"default": [], "no-zygote": ["--no-zygote"], "msrun": None}
#: The jobs: name -> (workers, script, the result line's start, environment).
JOBS = {"a": (8, DP, "dp rank=", {"EPOCHS": "10"}), "b": (2, SMOKE, "sum=3", {})}
ERROR_WORDS = ("Error", "error", "failed", "Failed", "timed out", "Traceback", "killed")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def command(path: str, n: int, script: str, log_dir: str) -> List[str]:
    flags = [
        f"--worker_num={n}",
        f"--local_worker_num={n}",
        f"--master_port={free_port()}",
        "--join=True",
        "--cluster_time_out=300",
        f"--log_dir={log_dir}",
    ]
    extra = PATHS[path]
    if extra is None:
        return [os.path.join(BIN, "msrun")] + flags + [script]
    return [PY, "-m", "launcher", "run"] + flags + extra + [script]


def last_error(log_dir: str, stderr: str) -> str:
    """The last line of the run's logs (then its stderr) that reads like an error."""
    for path in sorted(glob.glob(os.path.join(log_dir, "*.log"))) + [None]:
        lines = open(path, errors="replace").read().splitlines() if path else stderr.splitlines()
        hits = [ln for ln in lines if any(w in ln for w in ERROR_WORDS) and "INFO" not in ln[:10]]
        if hits:
            return f"{os.path.basename(path) if path else 'stderr'}: {hits[-1].strip()[:240]}"
    return "no error line"


def one_run(path: str, job: str, work: str, i: int, env: dict) -> Tuple[bool, float, int, str]:
    n, script, marker, extra = JOBS[job]
    log_dir = os.path.join(work, f"{job}_{path}_{i}")
    start = time.time()
    try:
        proc = subprocess.run(
            command(path, n, script, log_dir),
            cwd=work,
            env=dict(env, **extra),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            timeout=900,
        )
        rc, stderr = proc.returncode, proc.stderr
    except subprocess.TimeoutExpired as exc:
        rc, stderr = -1, f"timed out after 900 s {exc.stderr or ''}"
    took = time.time() - start
    missing = [r for r in range(n) if marker not in _read(os.path.join(log_dir, f"worker_{r}.log"))]
    ok = rc == 0 and not missing
    why = "" if ok else f"exit {rc}, result line missing on ranks {missing}; {last_error(log_dir, stderr)}"
    if ok:
        shutil.rmtree(log_dir, ignore_errors=True)
    return ok, took, rc, why


def _read(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"


def bench(
    job: str, runs: int, paths: Sequence[str], work: str, env: dict, stop_at: float
) -> Dict[str, Dict[str, list]]:
    got: Dict[str, Dict[str, list]] = {p: {"times": [], "failures": []} for p in paths}
    for i in range(runs):
        if time.time() >= stop_at:
            print(f"  ({job}) stopping after {i} rounds: --minutes reached", flush=True)
            break
        order = list(paths)[i % len(paths) :] + list(paths)[: i % len(paths)]
        line = []
        for path in order:
            ok, took, rc, why = one_run(path, job, work, i, env)
            got[path]["times"].append(took)
            if not ok:
                got[path]["failures"].append(why)
                print(f"  ({job}) round {i + 1} {path}: FAILED in {took:.1f} s: {why}", flush=True)
            line.append(f"{path} {took:.1f} s{'' if ok else ' FAILED'}")
        print(f"  ({job}) round {i + 1}: " + "; ".join(line), flush=True)
    return got


def report(job: str, got: Dict[str, Dict[str, list]], target: float) -> Dict[str, dict]:
    out = {}
    msrun = statistics.median(got["msrun"]["times"]) if got.get("msrun", {}).get("times") else None
    print(f"({job}) failures / runs, median time, ratio to msrun's median (target for the default <= {target:.2f}):")
    for path, d in got.items():
        if not d["times"]:
            continue
        med = statistics.median(d["times"])
        ratio = med / msrun if msrun else None
        out[path] = {
            "runs": len(d["times"]),
            "failures": len(d["failures"]),
            "median_s": round(med, 2),
            "ratio_to_msrun": None if ratio is None else round(ratio, 3),
            "failure_reasons": d["failures"],
        }
        print(
            f"    {path:<10} {len(d['failures'])} / {len(d['times'])} failed; median {med:.2f} s"
            + ("" if ratio is None else f"; ratio {ratio:.2f}"),
            flush=True,
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--only", choices=sorted(JOBS))
    ap.add_argument("--paths", default=",".join(PATHS))
    ap.add_argument("--minutes", type=float, default=None, help="start no new round after this long (per job)")
    ap.add_argument("--json", default=None, help="also write the results to this file")
    args = ap.parse_args()
    paths = [p for p in args.paths.split(",") if p]
    bad = [p for p in paths if p not in PATHS]
    if bad:
        raise SystemExit(f"--paths: unknown {', '.join(bad)}; use {', '.join(PATHS)}")
    env = dict(os.environ)
    env["PATH"] = BIN + os.pathsep + env.get("PATH", "")  # msrun runs the bare `python` on PATH
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("GLOG_v", "2")
    work = tempfile.mkdtemp(prefix="mslaunch-bench-reliability-")
    print(f"load before: {uptime()}", flush=True)
    results = {}
    try:
        for job, target in (("b", 0.55), ("a", 0.70)):
            if args.only not in (None, job):
                continue
            n = JOBS[job][0]
            print(
                f"({job}) {n}-worker {'data-parallel training' if job == 'a' else 'AllReduce'}, {args.runs} rounds of "
                f"{', '.join(paths)}",
                flush=True,
            )
            stop_at = time.time() + (args.minutes * 60 if args.minutes else 1e12)
            results[job] = report(job, bench(job, args.runs, paths, work, env, stop_at), target)
        print(f"load after: {uptime()}")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)
    finally:
        kept = [d for d in os.listdir(work)]
        if kept:
            print(f"logs of failed runs kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
