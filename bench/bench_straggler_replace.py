#!/usr/bin/env python3
"""``--straggler replace`` over ssh: from a slowdown to the planned restart on the spare, and the
job's step rate before, while slow, and after, all in one run on namespace hosts.

The job: 2 ranks of ``tests/scripts/dploop.py`` (compute, then a TCP barrier through the
scheduler: a data-parallel stand-in) on 2 namespace hosts, a third host spare, ``--straggler
replace:WINDOW``.  After ``--before`` seconds of steps, rank 1's host is put under a CPU quota
(cgroup v1, ``--quota`` us per 100 ms: its sshd's group, and the running rank moved in by pid).
Printed, in the same run:

* seconds from the quota to the ``straggler`` event, to the ``planned_restart`` event, and to the
  first step of the next attempt (on the spare);
* rank 0's step rate before the quota (the anchor), while slow (the quota to the planned
  restart), and after (the next attempt's steps), each as a ratio to the anchor.

With ``--trainer``, the job is the reference trainer instead (real MindSpore: ResNet-14 on 32x32
synthetic CIFAR-10, batch 8, checkpoints in a folder every host sees): the same quota, the planned
restart saves on SIGTERM and resumes on the spare; the run is stopped (SIGTERM to mslaunch) once
the spare has stepped ``--after`` seconds.

Usage: python bench/bench_straggler_replace.py [--trainer] [--window 6] [--quota 3000] [--before 15] [--after 15]
Needs root, OpenSSH and the cgroup v1 cpu controller (and MindSpore with ``--trainer``).  Exit 0 when
the job ended 0 on the spare (``--trainer``: stopped, 143, with its last attempt on the spare).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchkit import exit_if_cannot_run, job_events, step_rate, step_times, wait_until  # noqa: E402  (after sys.path)

from tests.harness.faultstream import rank_pids  # noqa: E402  (after sys.path is set above)
from tests.harness.hostfaults import CPU_ROOT, cgroup_v1_cpu, throttle_cpu, throttle_pids, unthrottle  # noqa: E402
from tests.harness.netns_cluster import NamespaceCluster  # noqa: E402  (after sys.path is set above)

DPLOOP = os.path.join(ROOT, "tests", "scripts", "dploop.py")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--window", type=float, default=6.0)
    ap.add_argument("--quota", type=int, default=3000)
    ap.add_argument("--before", type=float, default=15.0)
    ap.add_argument("--after", type=float, default=15.0)
    ap.add_argument("--trainer", action="store_true", help="the reference trainer (MindSpore) instead of dploop")
    args = ap.parse_args()
    exit_if_cannot_run()
    if not cgroup_v1_cpu():
        print("cannot run: no cgroup v1 cpu controller", file=sys.stderr)
        return 2
    work = tempfile.mkdtemp(prefix="bench-replace-")
    job, stop, mark = os.path.join(work, "job"), os.path.join(work, "stop"), f"replace-{os.getpid()}"
    throttled = False
    with NamespaceCluster(3, slots=1) as c:
        slow_ip = c.hosts[1].ip
        inv = os.path.join(work, "inv.yaml")
        with open(inv, "w") as fh:
            fh.write(f'defaults:\n  slots: 1\n  ssh: {{user: root, port: 22, key: "{c.key_path}"}}\nhosts:\n')
            fh.write("".join(f"  - host: {h.ip}\n" for h in c.hosts))
        argv = [
            sys.executable, "-m", "launcher", "run", "--hosts", inv, "--np", "2", "--master-port", "auto",
            "--log-dir", job, "--tee", "none", "--quiet", "--grace", "3", "--straggler", f"replace:{args.window:g}",
            "--env", f"FAULT_STREAM_MARK={mark}",
        ]  # fmt: skip
        if args.trainer:
            data = os.path.join(work, "data")
            subprocess.run(
                [sys.executable, "-m", "launcher", "data", "synth-cifar10", data, "--train", "4000", "--test", "50"],
                check=True, capture_output=True,
            )  # fmt: skip
            argv += [
                "--env", "GLOG_v=3", "-m", "launcher.workloads.resnet50_cifar10", "--data-path", data, "--arch",
                "resnet14", "--image-size", "32", "--batch-size", "8", "--epochs", "1", "--steps-per-epoch", "250",
                "--ckpt-dir", os.path.join(work, "ckpt"), "--ckpt-every", "5",
            ]  # fmt: skip
        else:
            argv += ["--no-python", sys.executable, DPLOOP, "150000", stop, "1000000"]
        env = dict(os.environ, MSLAUNCH_SSH_CONFIG=c.ssh_config)
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, cwd=work)
        try:
            wait_until(lambda: len(step_times(job, 0)) >= 3, 120, "the first steps")
            time.sleep(args.before)  # the anchor's steps (a bench measures over time; tests wait on conditions)
            t_slow = time.time()
            group = throttle_cpu(c, 1, quota_us=args.quota)
            throttled = True
            throttle_pids(os.path.relpath(group, CPU_ROOT), [rank_pids(mark, job)[("0", 1)]], quota_us=args.quota)
            named = wait_until(lambda: [e for e in job_events(job) if e["kind"] == "straggler"], 300, "the straggler")[
                0
            ]
            planned = wait_until(
                lambda: [e for e in job_events(job) if e["kind"] == "planned_restart"], 300, "the restart"
            )[0]
            first = wait_until(lambda: step_times(job, 1)[:1], 300, "the first step on the spare")[0]
            unthrottle(c, 1)
            throttled = False
            time.sleep(args.after)
            if args.trainer:
                proc.terminate()  # SIGTERM to mslaunch: the trainer saves and the job stops
            with open(stop, "w"):
                pass
            proc.communicate(timeout=120)
        finally:
            if throttled:
                unthrottle(c, 1)
            with open(stop, "w"):
                pass
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        left = c.all_pids()
    before = [t for t in step_times(job, 0) if t < t_slow]
    slow = [t for t in step_times(job, 0) if t >= t_slow]
    after = step_times(job, 1)
    with open(os.path.join(job, "summary.json")) as fh:
        summary = json.load(fh)
    hosts = sorted(p["host"] for p in summary["attempt_results"][-1]["processes"] if p["rank"] is not None)
    what = "the reference trainer (MindSpore, ResNet-14)" if args.trainer else "dploop"
    print(
        f"job: 2 ranks of {what} on 2 namespace hosts + 1 spare, --straggler replace:{args.window:g}, "
        f"quota {args.quota} us/100 ms"
    )
    print(f"named {named['time'] - t_slow:.1f} s after the quota: {named['evidence']}")
    print(
        f"planned restart {planned['time'] - t_slow:.1f} s after the quota; "
        f"first step on the spare {first - t_slow:.1f} s after"
    )
    base = step_rate(before)
    for name, times in (("before (anchor)", before), ("while slow", slow), ("after, on the spare", after)):
        rate = step_rate(times)
        ratio = f"{rate / base:.2f}x the anchor" if rate and base else "too few steps"
        print(f"{name}: {len(times)} steps, {rate or 0:.1f} steps/s, {ratio}")
    print(f"exit code {proc.returncode}; last attempt's hosts {hosts}; nothing left on any host: {not left}")
    shutil.rmtree(work, ignore_errors=True)
    ended = proc.returncode == (143 if args.trainer else 0)
    return 0 if ended and slow_ip not in hosts and not left else 1


if __name__ == "__main__":
    sys.exit(main())
