"""Local job benchmarks: mslaunch against msrun (MindSpore's own launcher), measured in one run.

(a) wall time of a trivial 2-worker AllReduce job, mslaunch / msrun (target <= 0.6);
(b) failure-to-exit latency: from a worker's failing exit to the launcher's exit (target <= 1 s),
    msrun's beside it;
(c) mslaunch's own CPU while its ranks sleep (target <= 1% of a core).

Runs alternate (msrun, mslaunch, msrun, ...) so that load on this shared machine hits both;
medians are printed.  Usage: python bench/bench_local.py [--runs 3] [--skip-msrun]
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

import psutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable
BIN = os.path.dirname(PY)

FAIL_SCRIPT = r"""
import os, sys, time
import mindspore as ms
from mindspore.communication import init, get_rank
ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
init()
if os.environ.get("MS_ROLE") == "MS_SCHED":
    sys.exit(0)
if get_rank() == 1:
    with open(os.environ["FAIL_STAMP"], "w") as fh:
        fh.write(repr(time.time()))
    os._exit(3)
time.sleep(120)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env() -> dict:
    e = dict(os.environ)
    e["PATH"] = BIN + os.pathsep + e.get("PATH", "")  # msrun runs the bare `python` on PATH
    return e


def run_msrun(work: str, argv: list, log_dir: str, extra_env=None) -> float:
    e = env()
    e.update(extra_env or {})
    cmd = [
        os.path.join(BIN, "msrun"),
        "--worker_num",
        "2",
        "--local_worker_num",
        "2",
        "--master_port",
        str(free_port()),
        "--join",
        "True",
        "--log_dir",
        log_dir,
    ] + argv
    start = time.time()
    subprocess.run(cmd, cwd=work, env=e, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
    return time.time() - start


def run_mslaunch(work: str, argv: list, log_dir: str, extra_env=None) -> float:
    e = env()
    e.update(extra_env or {})
    cmd = [PY, "-m", "launcher", "run", "--np", "2", "--master-port", "auto", "--log-dir", log_dir, "--quiet"] + argv
    start = time.time()
    subprocess.run(cmd, cwd=work, env=e, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
    return time.time() - start


def check_allreduce(log_dir: str) -> None:
    for rank in (0, 1):
        path = os.path.join(log_dir, f"worker_{rank}.log")
        text = open(path, errors="replace").read()
        if "sum=3" not in text:
            raise SystemExit(f"AllReduce result missing in {path}")


def bench_wall(work: str, runs: int, skip_msrun: bool) -> None:
    argv = [os.path.join(ROOT, "launcher", "workloads", "allreduce_smoke.py")]
    ms_times, nowait_times, msr_times = [], [], []
    for i in range(runs):
        if not skip_msrun:
            d = os.path.join(work, f"msrun_{i}")
            msr_times.append(run_msrun(work, argv, d))
            check_allreduce(d)
        d = os.path.join(work, f"msl_{i}")
        ms_times.append(run_mslaunch(work, argv, d))
        check_allreduce(d)
        d = os.path.join(work, f"msl_nowait_{i}")
        nowait_times.append(run_mslaunch(work, ["--no-sched-wait"] + argv, d))
        check_allreduce(d)
    m = statistics.median(ms_times)
    n = statistics.median(nowait_times)
    print(
        f"(a) 2-worker AllReduce wall time, median of {runs}: mslaunch {m:.2f} s  "
        + " ".join(f"{t:.2f}" for t in ms_times)
    )
    print(f"    mslaunch --no-sched-wait {n:.2f} s  " + " ".join(f"{t:.2f}" for t in nowait_times))
    if msr_times:
        r = statistics.median(msr_times)
        print(f"    msrun {r:.2f} s  " + " ".join(f"{t:.2f}" for t in msr_times))
        print(f"    ratio mslaunch/msrun = {m / r:.2f}, with --no-sched-wait {n / r:.2f}  (target <= 0.6)")


def bench_failure(work: str, runs: int, skip_msrun: bool) -> None:
    script = os.path.join(work, "fail_rank1.py")
    with open(script, "w") as fh:
        fh.write(FAIL_SCRIPT)
    lat_ms, lat_msr = [], []
    for i in range(runs):
        for name, runner, out in (("msrun", run_msrun, lat_msr), ("mslaunch", run_mslaunch, lat_ms)):
            if name == "msrun" and skip_msrun:
                continue
            stamp = os.path.join(work, f"stamp_{name}_{i}")
            runner(work, [script], os.path.join(work, f"fail_{name}_{i}"), {"FAIL_STAMP": stamp})
            end = time.time()
            failed_at = float(open(stamp).read())
            out.append(end - failed_at)
    m = statistics.median(lat_ms)
    print(
        f"(b) failure-to-exit latency, median of {runs}: mslaunch {m:.2f} s  "
        + " ".join(f"{t:.2f}" for t in lat_ms)
        + "  (target <= 1 s)"
    )
    if lat_msr:
        print(f"    msrun {statistics.median(lat_msr):.2f} s  " + " ".join(f"{t:.2f}" for t in lat_msr))


def bench_cpu(work: str, seconds: float = 10.0) -> None:
    prog = os.path.join(ROOT, "tests", "scripts", "rankprog.py")
    log_dir = os.path.join(work, "cpu")
    cmd = [
        PY,
        "-m",
        "launcher",
        "run",
        "--np",
        "2",
        "--master-port",
        "auto",
        "--log-dir",
        log_dir,
        prog,
        "ok",
        str(seconds + 6),
    ]
    proc = subprocess.Popen(cmd, cwd=work, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    ps = psutil.Process(proc.pid)
    time.sleep(3.0)  # start-up done; ranks sleeping
    t0 = ps.cpu_times()
    w0 = time.monotonic()
    time.sleep(seconds)
    t1 = ps.cpu_times()
    w1 = time.monotonic()
    proc.wait(timeout=60)
    used = (t1.user + t1.system) - (t0.user + t0.system)
    print(
        f"(c) mslaunch CPU while 2 ranks sleep (default console): {100 * used / (w1 - w0):.2f}% of a core over "
        f"{w1 - w0:.1f} s  (target <= 1%)"
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--skip-msrun", action="store_true")
    ap.add_argument("--only", choices=["a", "b", "c"])
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="mslaunch-bench-")
    try:
        if args.only in (None, "c"):
            bench_cpu(work)
        if args.only in (None, "a"):
            bench_wall(work, args.runs, args.skip_msrun)
        if args.only in (None, "b"):
            bench_failure(work, args.runs, args.skip_msrun)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
