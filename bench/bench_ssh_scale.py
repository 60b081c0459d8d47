#!/usr/bin/env python3
"""Benchmark: the ssh backend at scale (one agent per host), all figures from ONE run.

One namespace cluster (``tests/harness/netns_cluster.py``: one network namespace and one sshd
per "host"; needs root, ``ip netns`` and OpenSSH) of the largest size asked for; smaller jobs
use its first hosts.  Ranks are MindSpore-free programs: ``--ranks sh`` (default) a shell
script stamping its start with ``date`` (no interpreter start-up, so the figures show the launch
path, not 128 Python start-ups on this machine's shared cores), ``--ranks python`` a ``python -S``
script; the dynamic method's scheduler (host 1) is the Python script and only listens.  Measured:

1. **start-up**: time from just before ``mslaunch run`` to the latest rank's own start stamp,
   for 1 host x 8 ranks (the anchor) and 16 (and 32) hosts x 8 ranks, runs interleaved, median
   of ``--runs``; ratio to the anchor (target: 16 x 8 <= 2.5x).  Beside each: the floor, the same
   number of rank programs started at once on this machine without SSH (every namespace host
   shares this machine's CPUs, so 128 ranks cost 16x the CPU of 8 here, unlike on real hosts).
2. **failure-to-exit**: 16 x 8 ranks, one rank exits 1 once all started (+1 s): from its exit stamp to
   the moment ``mslaunch`` has exited (target <= 1 s); then processes left on any host (0).
3. **threads and RSS** of the mslaunch process while every rank runs: 1 x 8, 16 x 1 and 16 x 8
   (threads must not grow per rank).
4. **logs**: 16 x 8 = 128 ranks print 50 numbered lines/s each for ``--log-seconds`` (60): every
   line must be in its ``worker_<rank>.log``, in order; mslaunch's CPU seconds (user+sys, with
   its watchdog) are reported.

Logins: ``--bashrc`` lets root's ``~/.bashrc`` run in every SSH session (here it runs
``pyenv init``: a slow login shell, the common case on training hosts); by default the
harness's sessions skip it (a shell that reads no rc files).  The machine may be shared: the
ratios compare figures taken in the same run.

Usage::

    python bench/bench_ssh_scale.py [--sizes 1,16,32] [--runs 3] [--log-seconds 60] [--bashrc] [--ranks sh|python]

Exit code: 0 when every target is met, 1 otherwise, 2 when namespace clusters cannot run here.
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import psutil  # noqa: E402  (after sys.path is set above)
from benchkit import RANK_PROGRAM_HEAD, exit_if_cannot_run, stamps_of, wait_stamps  # noqa: E402  (after sys.path is set above)

START_RATIO = 2.5
FAIL_TO_EXIT = 1.0
PER_HOST = 8

RANK_PROGRAM = (
    RANK_PROGRAM_HEAD
    + """\
stamps, mode, arg = sys.argv[1], sys.argv[2], sys.argv[3]
rank = os.environ["RANK_ID"]
with open(os.path.join(stamps, "rank_" + rank), "w") as fh:
    fh.write(repr(time.time()))
if mode == "sleep":
    time.sleep(float(arg))
elif mode == "fail":
    if rank == "9":  # every rank started, then 1 s
        while len([f for f in os.listdir(stamps) if f.startswith("rank_")]) < int(arg):
            time.sleep(0.05)
        time.sleep(1)
        with open(os.path.join(stamps, "failed"), "w") as fh:
            fh.write(repr(time.time()))
        sys.exit(1)
    time.sleep(3600)
elif mode == "log":
    rate, secs = 50, float(arg)
    t0 = time.time()
    for i in range(int(rate * secs)):
        delay = t0 + i / rate - time.time()
        if delay > 0:
            time.sleep(delay)
        print("rank%s line %d" % (rank, i), flush=True)
"""
)

#: The light rank program (``--ranks sh``): a shell and ``date``, no interpreter start-up; the
#: dynamic method's scheduler and the logs run use the Python program.
RANK_SH = """\
#!/bin/sh
if [ "$MS_ROLE" = MS_SCHED ]; then exec "$RANK_PYTHON" -S "$(dirname "$0")/rank.py" "$@"; fi
date +%s.%N > "$1/rank_$RANK_ID"
case "$2" in
  sleep) sleep "$3" ;;
  fail) if [ "$RANK_ID" = 9 ]; then
          while [ "$(ls "$1" | grep -c rank_)" -lt "$3" ]; do sleep 0.05; done
          sleep 1; date +%s.%N > "$1/failed"; exit 1
        fi; sleep 3600 ;;
  *) exec "$RANK_PYTHON" -S "$(dirname "$0")/rank.py" "$@" ;;
esac
"""


class Bench:
    def __init__(self, cluster, work: str, ranks: str) -> None:
        self.c = cluster
        self.work = work
        self.env = dict(
            os.environ,
            MSLAUNCH_SSH_CONFIG=cluster.ssh_config,
            MSLAUNCH_HOME=os.path.join(work, "home"),
            RANK_PYTHON=sys.executable,
        )
        self.env.pop("PYTHONUNBUFFERED", None)
        with open(os.path.join(work, "rank.py"), "w") as fh:
            fh.write(RANK_PROGRAM)
        with open(os.path.join(work, "rank.sh"), "w") as fh:
            fh.write(RANK_SH)
        os.chmod(os.path.join(work, "rank.sh"), 0o755)
        self.ranks = ranks
        self.n = 0

    def program(self, mode: str) -> List[str]:
        """The rank's argv before its arguments (the logs run always uses Python)."""
        if self.ranks == "sh" and mode != "log":
            return [os.path.join(self.work, "rank.sh")]
        return [sys.executable, "-S", os.path.join(self.work, "rank.py")]

    def hostfile(self, hosts: int, per_host: int) -> str:
        path = os.path.join(self.work, f"hosts_{hosts}x{per_host}")
        with open(path, "w") as fh:
            fh.writelines(f"{h.ip} slots={per_host}\n" for h in self.c.hosts[:hosts])
        return path

    def launch(self, hosts: int, per_host: int, mode: str, arg: str) -> Tuple[subprocess.Popen, str, str, float]:
        self.n += 1
        stamps = os.path.join(self.work, f"stamps{self.n}")
        os.mkdir(stamps)
        job = os.path.join(self.work, f"job{self.n}")
        argv = [
            sys.executable,
            "-m",
            "launcher",
            "run",
            "-q",
            "--hosts",
            self.hostfile(hosts, per_host),
            "--launcher",
            "ssh",
            "--master-port",
            "auto",
            "--log-dir",
            job,
            "--grace",
            "2",
            "--env",
            f"RANK_PYTHON={sys.executable}",
            "--no-python",
            *self.program(mode),
            stamps,
            mode,
            arg,
        ]
        start = time.time()
        proc = subprocess.Popen(
            argv, cwd=self.work, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        return proc, stamps, job, start

    def left(self, within: float = 15.0) -> int:
        deadline = time.time() + within
        while True:
            n = sum(len(p) for p in self.c.all_pids().values())
            if n == 0 or time.time() > deadline:
                return n
            time.sleep(0.1)


def wait_exit(proc: subprocess.Popen, timeout: float = 120.0) -> Tuple[int, float, float]:
    """(returncode, exit time, CPU seconds of mslaunch and its waited-for children)."""
    deadline = time.time() + timeout
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            when = time.time()
            proc.returncode = os.waitstatus_to_exitcode(status)
            return proc.returncode, when, usage.ru_utime + usage.ru_stime
        if time.time() > deadline:
            proc.send_signal(signal.SIGINT)
            deadline = time.time() + 30
        time.sleep(0.005)


def start_time(b: Bench, hosts: int) -> float:
    proc, stamps, _, start = b.launch(hosts, PER_HOST, "sleep", "1")
    values = wait_stamps(stamps, hosts * PER_HOST, proc)
    rc, _, _ = wait_exit(proc)
    if rc != 0:
        raise RuntimeError(f"{hosts} x {PER_HOST}: mslaunch exit {rc}: {proc.stderr.read()[-2000:]}")
    return max(values) - start


def local_floor(b: Bench, n: int) -> float:
    """The same ``n`` rank programs started at once on this machine without SSH or mslaunch:
    from the first spawn to the latest start stamp (the CPU floor every host shares here)."""
    b.n += 1
    stamps = os.path.join(b.work, f"stamps{b.n}")
    os.mkdir(stamps)
    start = time.time()
    procs = [
        subprocess.Popen([*b.program("sleep"), stamps, "sleep", "1"], env=dict(b.env, RANK_ID=str(r)), cwd=b.work)
        for r in range(n)
    ]
    values = stamps_of(stamps)
    while len(values) < n:
        time.sleep(0.01)
        values = stamps_of(stamps)
    for p in procs:
        p.wait()
    return max(values) - start


def fail_to_exit(b: Bench, hosts: int) -> Tuple[float, int]:
    proc, stamps, _, _ = b.launch(hosts, PER_HOST, "fail", str(hosts * PER_HOST))
    wait_stamps(stamps, hosts * PER_HOST, proc)
    rc, when, _ = wait_exit(proc)
    failed = float(open(os.path.join(stamps, "failed")).read())
    if rc != 1:
        raise RuntimeError(f"expected exit 1, got {rc}: {proc.stderr.read()[-2000:]}")
    return when - failed, b.left()


def threads_rss(b: Bench, hosts: int, per_host: int) -> Tuple[int, float]:
    proc, stamps, _, _ = b.launch(hosts, per_host, "sleep", "6")
    wait_stamps(stamps, hosts * per_host, proc)
    time.sleep(1.0)  # every ready frame in, start-up threads gone
    p = psutil.Process(proc.pid)
    threads, rss = p.num_threads(), p.memory_info().rss / 2**20
    rc, _, _ = wait_exit(proc)
    if rc != 0:
        raise RuntimeError(f"mslaunch exit {rc}: {proc.stderr.read()[-2000:]}")
    return threads, rss


def logs(b: Bench, hosts: int, seconds: float) -> Tuple[int, int, int, float, float]:
    """(ranks, lines expected per rank, ranks whose log is complete and ordered, CPU s, wall s)."""
    proc, stamps, job, start = b.launch(hosts, PER_HOST, "log", f"{seconds:g}")
    rc, when, cpu = wait_exit(proc, timeout=seconds + 120)
    if rc != 0:
        raise RuntimeError(f"mslaunch exit {rc}: {proc.stderr.read()[-2000:]}")
    n = hosts * PER_HOST
    lines = int(50 * seconds)
    good = 0
    for rank in range(n):
        with open(os.path.join(job, f"worker_{rank}.log")) as fh:
            got = fh.read().splitlines()
        if got == [f"rank{rank} line {i}" for i in range(lines)]:
            good += 1
    return n, lines, good, cpu, when - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1,16,32", help="host counts for start-up (first = the anchor)")
    parser.add_argument("--runs", type=int, default=3, help="runs per size (median reported)")
    parser.add_argument("--log-seconds", type=float, default=60.0, help="seconds of the logs run")
    parser.add_argument("--bashrc", action="store_true", help="sessions run root's ~/.bashrc (pyenv init here)")
    parser.add_argument(
        "--ranks",
        choices=("sh", "python"),
        default="sh",
        help="rank program for start-up and failure runs: sh + date (light) or python -S",
    )
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    exit_if_cannot_run()
    from tests.harness.netns_cluster import NamespaceCluster

    ok = True
    big = 16 if max(sizes) >= 16 else max(sizes)
    with (
        NamespaceCluster(max(sizes), slots=PER_HOST, source_bashrc=args.bashrc) as cluster,
        tempfile.TemporaryDirectory(prefix="mslscale-") as work,
    ):
        b = Bench(cluster, work, args.ranks)
        login = "root's ~/.bashrc (pyenv init)" if args.bashrc else "no rc files"
        print(
            f"ssh backend, one agent per host; {os.cpu_count()} CPUs (machine shared); login shell: {login}; "
            f"rank program: {'sh + date' if args.ranks == 'sh' else 'python -S'}"
        )
        start_time(b, 1)  # warm-up
        times: Dict[int, List[float]] = {s: [] for s in sizes}
        floor: Dict[int, List[float]] = {s: [] for s in sizes}
        for _ in range(args.runs):
            for s in sizes:
                times[s].append(start_time(b, s))
                floor[s].append(local_floor(b, s * PER_HOST))
                print(
                    f"  start {s} x {PER_HOST}: {times[s][-1]:.3f} s (local floor {floor[s][-1]:.3f} s)",
                    file=sys.stderr,
                )
        base = statistics.median(times[sizes[0]])
        print(f"\n1. time until every rank started (median of {args.runs}):")
        for s in sizes:
            med = statistics.median(times[s])
            print(
                f"   {s:>2} hosts x {PER_HOST} = {s * PER_HOST:>3} ranks: {med:.3f} s  ({med / base:.2f}x the "
                f"{sizes[0]} x {PER_HOST} anchor)"
                f"   runs: {', '.join(f'{t:.3f}' for t in times[s])}"
            )
            print(
                f"      floor: the same {s * PER_HOST} rank programs started at once here, no SSH: "
                f"{statistics.median(floor[s]):.3f} s"
            )
        if 16 in times:
            ratio = statistics.median(times[16]) / base
            met = ratio <= START_RATIO
            ok &= met
            print(f"   16 x 8 / 1 x 8 = {ratio:.2f} (target <= {START_RATIO:g}): {'met' if met else 'NOT met'}")

        print(f"\n2. failure-to-exit, {big} x {PER_HOST} ranks (rank 9 exits 1 once every rank started, + 1 s):")
        fte = []
        for _ in range(args.runs):
            took, left = fail_to_exit(b, big)
            fte.append(took)
            print(f"   rank exit -> mslaunch exit {took:.3f} s; processes left on all hosts: {left}")
            ok &= left == 0
        met = statistics.median(fte) <= FAIL_TO_EXIT
        ok &= met
        print(f"   median {statistics.median(fte):.3f} s (target <= {FAIL_TO_EXIT:g} s): {'met' if met else 'NOT met'}")

        print("\n3. mslaunch's threads and RSS while every rank runs:")
        rows = []
        for hosts, per_host in ((1, PER_HOST), (big, 1), (big, PER_HOST)):
            t, rss = threads_rss(b, hosts, per_host)
            rows.append((hosts, per_host, t, rss))
            print(f"   {hosts:>2} hosts x {per_host} = {hosts * per_host:>3} ranks: {t} threads, RSS {rss:.1f} MiB")
        same = rows[1][2] == rows[2][2]
        ok &= same
        print(
            f"   {big} x 1 vs {big} x {PER_HOST}: threads {rows[1][2]} vs {rows[2][2]} "
            f"({'do not grow per rank' if same else 'GROW per rank'})"
        )

        print(f"\n4. logs: {big} x {PER_HOST} ranks x 50 lines/s for {args.log_seconds:g} s:")
        n, lines, good, cpu, wall = logs(b, big, args.log_seconds)
        ok &= good == n
        print(
            f"   {good} of {n} worker logs hold all {lines} lines in order ({n * lines} lines in all); "
            f"mslaunch CPU {cpu:.2f} s over {wall:.1f} s wall ({100 * cpu / wall:.1f}% of one core)"
        )
        print(f"   processes left on all hosts: {b.left()}")
    print(f"\nall targets {'met' if ok else 'NOT met'}")
    return 0 if ok else 1


if __name__ == "__main__":
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(4096, hard)), hard))
    sys.exit(main())
