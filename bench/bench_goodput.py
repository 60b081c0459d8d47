#!/usr/bin/env python3
"""Goodput under a stream of faults: the reference trainer on namespace hosts over ssh, fault-free
and under a seeded stream of real faults, and the same stream for a baseline, all in one run.

The job: ``launcher.workloads.resnet50_cifar10`` (ResNet-14, 32x32 synthetic CIFAR-10, batch 8,
``--ckpt-every`` 5 steps), 3 ranks on 3 namespace hosts (``tests/harness/netns_cluster.py``), one
per host, a 4th host spare, ``--steps`` optimizer steps.  Runs, back to back:

1. **fault-free**, mslaunch's defaults (``--max-restarts`` set) with ``--straggler replace:6
   --min-hosts 2`` (a slow host is left for the spare, judged over 6 s; once the spare is gone
   the job goes on with the hosts left): its wall time F and step rate;
2. **faulty**, the same job with the stream of :mod:`tests.harness.faultstream` injected from
   outside: fault *i* once the job trained ``i x --every`` seconds' worth of fault-free steps
   (kinds ``--kinds``: kill, stop, cut, restart, slow, ckpt; ranks drawn with ``--seed``); its
   wall time W;
3. **baseline**, the same stream for what a torchrun or msrun user gets: every restart cold
   (``--cold-restarts --no-zygote``, MindSpore's compile cache off), nothing watched beyond MindSpore's own
   timeouts (``--stopped-timeout off --hang-timeout off --straggler off``), no spare host (a lost
   host fails the run; a slow host stays slow until the next fault).

With ``--side-by-side`` the fault-free and the faulty job run at the same time instead, each on
a cluster of its own pinned to one core of two, and the two swap cores every 10 s (each job
spends as long on each core: two vCPUs ran the same loop 18 % apart here, the other way round
minutes later), so that F and W are measured on the machine of the same minutes; the faults
come at evenly spaced new steps (the fault-free time between two is printed), and the free core
stays loaded once the fault-free job ended.  No baseline there.

With ``--also "FLAGS"``, a second faulty run with those mslaunch flags added (e.g. ``--rejoin-after
30 --grow-at-checkpoint``), the same stream, against the same fault-free run.

Printed for each faulty run: **ETTR = F / W**; beside it ETTR within the faulty run (1 - its badput
measured from outside / W: no second run enters it) and each run's median step time, since the
machine is shared and its speed drifts between and within runs (:mod:`tests.harness.steppace`); a
line per fault (when injected, noticed, the next new step trained) and badput by phase (detect,
teardown, restart to first step, steps trained again); whether it ended 0 by itself, every step
done, nothing left on any host, and whether the final parameters (rank 0's last checkpoint) are
byte for byte the fault-free run's.

Usage: python bench/bench_goodput.py [--steps 320] [--every 75] [--kinds kill,stop,cut,restart,slow,ckpt]
       [--ckpt-every 5|auto:5] [--seed 1] [--no-baseline] [--also "FLAGS"] [--keep DIR] [--side-by-side]
Needs root (namespaces), OpenSSH and MindSpore.  Exit 0 when the faulty run ended 0 with every step.
"""

from __future__ import annotations

import argparse
import glob
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from typing import Callable, Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchkit import exit_if_cannot_run  # noqa: E402  (after sys.path is set above)

from tests.harness.corepair import Alternate, busy, core_speeds, pin_cluster, tree  # noqa: E402  (after sys.path is set above)
from tests.harness.faultstream import (  # noqa: E402  (after sys.path is set above)
    FaultStream,
    Injected,
    badput_table,
    inside_and_outside,
)
from tests.harness.netns_cluster import NamespaceCluster  # noqa: E402  (after sys.path is set above)
from tests.harness.steppace import ettr_within, median_step_ms  # noqa: E402  (after sys.path is set above)

PY = sys.executable
ACTIVE = 3  # hosts with a rank; one more is spare
#: What the fault-free and the faulty run add to mslaunch's defaults: a slow host is left for the
#: spare (``--straggler``, :data:`STRAGGLER` unless asked otherwise), and once the spare is gone the
#: job goes on with the hosts left.
MSLAUNCH_FLAGS = ["--min-hosts", "2"]
#: The straggler window: over 10 s the slow host was named 14-15 s after its quota, over 6 s in
#: 8.6-8.8 s, and the fault-free job beside it named nobody (3 runs, 2026-11-29; docs/long-jobs.md).
STRAGGLER = "replace:6"


def inventory(c: NamespaceCluster, path: str, hosts: int) -> str:
    lines = ["defaults:", "  slots: 1", f'  ssh: {{user: root, port: 22, key: "{c.key_path}"}}', "hosts:"]
    lines += [f"  - host: {h.ip}" for h in c.hosts[:hosts]]
    with open(path, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    return path


def run_job(
    name: str,
    c: NamespaceCluster,
    work: str,
    data: str,
    steps: int,
    flags: List[str],
    hosts: int,
    stream: Optional[Tuple[List[str], List[int], int]] = None,
    ckpt_every: str = "5",
    core: Optional[int] = None,
    on_start: Optional[Callable[[int], None]] = None,
) -> Dict[str, object]:
    """One job; its wall time, exit code, faults and what it left (``core``: mslaunch starts on
    that core alone, as the cluster's hosts do once :func:`pin_cluster` put them there;
    ``on_start``: called with mslaunch's pid)."""
    folder = os.path.join(work, name)
    os.makedirs(folder)
    job, ckpt = os.path.join(folder, "job"), os.path.join(folder, "ckpt")
    mark = f"goodput-{name}-{os.getpid()}"
    where = ["--hosts", inventory(c, os.path.join(folder, "inv.yaml"), hosts), "--max-restarts", "8"]
    argv = job_argv(where, job, mark, flags, trainer_argv(data, steps, ckpt, ckpt_every))
    env = dict(os.environ, MSLAUNCH_SSH_CONFIG=c.ssh_config)
    fs = None
    if stream is not None:
        kinds, at_steps, seed = stream
        fs = FaultStream(
            job,
            kinds=kinds,
            at_steps=at_steps,
            mark=mark,
            seed=seed,
            cluster=c,
            ckpt_path=lambda rank: os.path.join(ckpt, f"ckpt_{rank}"),  # the trainer's folder of a rank's checkpoints
        )
    run = run_streamed(argv, env, folder, fs, core, on_start)
    run.update(left=wait_empty(c), job=job, kinds=list(stream[0]) if stream is not None else [])
    last = sorted(glob.glob(os.path.join(ckpt, "ckpt_0", f"resnet14-1_{steps}.ckpt")))
    run["final"] = last[0] if last else None
    return run


def job_argv(where: List[str], job: str, mark: str, flags: List[str], program: List[str]) -> List[str]:
    """``mslaunch run`` as every goodput job runs it: ``where`` (the hosts or the backend), 3
    ranks, quiet, the job's folder ``job``, the fault stream's ``mark`` in every rank's
    environment, then ``flags`` and the ``program``."""
    head = [PY, "-m", "launcher", "run", *where, "--np", str(ACTIVE), "--master-port", "auto", "--log-dir", job]
    quiet = ["--tee", "none", "--quiet", "--env", "GLOG_v=3", "--env", f"FAULT_STREAM_MARK={mark}"]
    return head + quiet + flags + program


def trainer_argv(data: str, steps: int, ckpt: str, ckpt_every: str = "5") -> List[str]:
    """The reference trainer as every goodput job runs it: ResNet-14, 32x32, batch 8, seeded,
    ``steps`` optimizer steps in one epoch, checkpoints every 5 steps to ``ckpt``."""
    return [
        "-m",
        "launcher.workloads.resnet50_cifar10",
        "--arch",
        "resnet14",
        "--data-path",
        data,
        "--image-size",
        "32",
        "--batch-size",
        "8",
        "--workers",
        "1",
        "--seed",
        "1",
        "--epochs",
        "1",
        "--steps-per-epoch",
        str(steps),
        "--ckpt-dir",
        ckpt,
        "--ckpt-every",
        ckpt_every,
    ]


def run_streamed(
    argv: List[str],
    env: Dict[str, str],
    folder: str,
    fs: Optional[FaultStream],
    core: Optional[int] = None,
    on_start: Optional[Callable[[int], None]] = None,
) -> Dict[str, object]:
    """Run ``mslaunch`` with the fault stream ``fs`` beside it (None: no faults); its start, wall
    time, exit code, stderr and the faults as injected and accounted."""
    t0 = time.time()
    pin = (lambda: os.sched_setaffinity(0, {core})) if core is not None else None
    proc = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=folder, env=env, preexec_fn=pin
    )
    if on_start is not None:
        on_start(proc.pid)
    if fs is not None:
        fs.start()
    try:
        _, err = proc.communicate(timeout=3600)
    finally:
        if fs is not None:
            fs.stop()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    faults: List[Injected] = fs.account() if fs is not None else []
    return {
        "wall": time.time() - t0,
        "t0": t0,
        "code": proc.returncode,
        "err": err,
        "faults": faults,
        "errors": fs.errors if fs is not None else [],
    }


def wait_empty(c: NamespaceCluster, within: float = 20.0) -> Dict[str, List[int]]:
    deadline = time.monotonic() + within
    while True:
        left = c.all_pids()
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def side_by_side(args: argparse.Namespace, kinds: List[str], work: str, data: str) -> Optional[Dict[str, object]]:
    """``--side-by-side``: the fault-free and the faulty job at the same time, each with its own
    cluster on its own core, so that both see the machine's speed of the same minutes; the
    faults at evenly spaced new steps.  The faulty run's report, or None (fewer than 2 cores)."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        print("--side-by-side needs 2 cores")
        return None
    free_core, faulty_core = cores[0], cores[1]
    timed = [k for k in kinds if k != "restart"]
    at = [(i + 1) * args.steps // (len(timed) + 1) for i in range(len(timed))]
    flags = mslaunch_flags(args)
    print(f"side by side: fault-free on core {free_core}, faulty on core {faulty_core}")
    print(f"stream: {kinds}, at new steps {at}, seed {args.seed}")
    with NamespaceCluster(ACTIVE + 1, slots=1) as a, NamespaceCluster(ACTIVE + 1, slots=1) as b:
        pin_cluster(a, free_core)
        pin_cluster(b, faulty_core)
        speeds = core_speeds([free_core, faulty_core])
        print(f"core speeds before (loops/s): {speeds[0]:.3g} and {speeds[1]:.3g} (ratio {speeds[1] / speeds[0]:.3f})")
        results: Dict[str, Dict[str, object]] = {}
        pids: Dict[str, Optional[int]] = {"free": None, "faulty": None}
        filler: List["subprocess.Popen[bytes]"] = []

        def group(c: NamespaceCluster, key: str) -> Callable[[], List[int]]:
            return lambda: [p for ps in c.all_pids(include_sshd=True).values() for p in ps] + tree(pids[key])

        def free_then_busy() -> None:
            results["free"] = run_job(
                "fault-free", a, work, data, args.steps, flags, ACTIVE + 1, None, args.ckpt_every, free_core,
                lambda pid: pids.__setitem__("free", pid),
            )  # fmt: skip
            if "faulty" not in results:  # the free job's place stays loaded until the faulty one ends
                filler.append(busy(free_core))
                pids["free"] = filler[0].pid

        swap = Alternate([group(a, "free"), group(b, "faulty")], [free_core, faulty_core])
        with swap:
            t = threading.Thread(target=free_then_busy)
            t.start()
            try:
                results["faulty"] = run_job(
                    "faulty", b, work, data, args.steps, flags, ACTIVE + 1, (kinds, at, args.seed), args.ckpt_every,
                    faulty_core, lambda pid: pids.__setitem__("faulty", pid),
                )  # fmt: skip
                t.join()
            finally:
                for p in filler:
                    p.kill()
                    p.wait()
        print(f"the two jobs swapped cores every {swap.every:g} s: {swap.rounds} times")
        speeds = core_speeds([free_core, faulty_core])
        print(f"core speeds after (loops/s): {speeds[0]:.3g} and {speeds[1]:.3g} (ratio {speeds[1] / speeds[0]:.3f})")
    free, faulty = results["free"], results["faulty"]
    assert free["code"] == 0 and free["final"] is not None, free["err"]
    rate = args.steps / float(free["wall"])  # type: ignore[arg-type]  # run_job's dict: a float
    gap = (args.steps / (len(timed) + 1)) / rate if timed else 0.0
    print(f"fault-free: {free['wall']:.1f} s for {args.steps} steps: one fault per {gap:.0f} s of fault-free time")
    report(f"mslaunch side by side (defaults and {' '.join(flags)}, one spare host)", faulty, free)
    return faulty


def same_bytes(a: Optional[str], b: Optional[str]) -> Optional[bool]:
    if a is None or b is None:
        return None
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return fa.read() == fb.read()


def report(name: str, run: Dict[str, object], free: Dict[str, object]) -> None:
    wall = float(run["wall"])  # type: ignore[arg-type]  # run_job's dict: a float
    ettr = float(free["wall"]) / wall  # type: ignore[arg-type]  # run_job's dict: a float
    code = run["code"]
    if code == 0 and run["final"] is not None:
        print(f"\n== {name}: wall {wall:.1f} s, ETTR = fault-free / faulty = {ettr:.3f}, exit code {code}")
    else:  # a run that did not finish kept no ratio: its steps were not all trained
        print(f"\n== {name}: FAILED after {wall:.1f} s (exit code {code}): no ETTR, the job did not finish")
    faults: List[Injected] = run["faults"]  # type: ignore[assignment]  # run_job's dict: the faults
    if code == 0 and run["final"] is not None:
        lost = [next((v for v in (f.net(), f.lost()) if v is not None), None) for f in faults]
        within = ettr_within(wall, lost)
        print(f"   ETTR within this run (1 - the faults' net cost / wall; no second run in it): {within:.3f}")
        steps = [median_step_ms(str(r["job"])) for r in (free, run)]
        if None not in steps:
            print(
                f"   the machine's speed: a median step took {steps[0] / 1000:.2f} s fault-free and"
                f" {steps[1] / 1000:.2f} s here (its faults' slower steps included)"
            )
    for line in badput_table(faults, float(run["t0"])):  # type: ignore[arg-type]  # run_job's dict: a float
        print("   " + line)
    print("   badput by phase, measured from outside and by mslaunch itself (summary.json's goodput):")
    for line in inside_and_outside(faults, str(run["job"])):
        print("     " + line)
    print(f"   ended 0 by itself: {code == 0}; every step done: {run['final'] is not None}")
    print(f"   nothing left on any host: {not run['left']} {run['left'] or ''}")
    same = same_bytes(run["final"], free["final"])  # type: ignore[arg-type]  # run_job's dict: paths
    print(f"   final parameters byte for byte the fault-free run's: {same}")
    if same is False:
        print(
            "   (they differ by design: a resumed trainer draws a new batch order, seed + global step, instead\n"
            "    of replaying the batches of the run it resumes (launcher/workloads/resnet50_cifar10.py); from the\n"
            "    first resume on the two runs train on other batches, so their weights part)"
        )
    if run["errors"]:
        print(f"   stream errors: {run['errors']}")
    if len(faults) < len(run["kinds"]):  # type: ignore[arg-type]  # run_job's dict: the kinds
        print(f"   only {len(faults)} of {len(run['kinds'])} faults were injected: the job ended first")  # type: ignore[arg-type]  # run_job's dict: the kinds
    if code != 0:
        print("   mslaunch said: " + " | ".join(str(run["err"]).strip().splitlines()[-3:]))


def mslaunch_flags(args: argparse.Namespace) -> List[str]:
    """mslaunch's flags for both of its runs: ``--straggler`` as asked, and :data:`MSLAUNCH_FLAGS`."""
    return ["--straggler", args.straggler, *MSLAUNCH_FLAGS]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=320, help="optimizer steps of the job (about 5 minutes here)")
    ap.add_argument("--every", type=float, default=75.0, help="seconds of fault-free training between faults")
    ap.add_argument("--kinds", default="kill,stop,cut,restart")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-baseline", action="store_true")
    ap.add_argument(
        "--ckpt-every",
        default="5",
        help="the trainer's --ckpt-every: 5 steps, or auto:5 (the interval mslaunch offers after a fault, Young/Daly)",
    )
    ap.add_argument(
        "--straggler", default=STRAGGLER, help="mslaunch's --straggler in both its runs (default %(default)s)"
    )
    ap.add_argument("--also", default=None, help='a second faulty run with these mslaunch flags added ("--a 1 --b")')
    ap.add_argument("--keep", default=None, help="keep the jobs' folders here")
    ap.add_argument(
        "--side-by-side",
        action="store_true",
        help="the fault-free and the faulty job at once, each on its own core with its own cluster (no baseline)",
    )
    args = ap.parse_args()
    if args.side_by_side and args.also:
        ap.error("--side-by-side runs one faulty job beside the fault-free one: no --also")
    exit_if_cannot_run()
    work = args.keep or tempfile.mkdtemp(prefix="bench-goodput-")
    os.makedirs(work, exist_ok=True)
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    try:
        data = os.path.join(work, "data")
        subprocess.run(
            # one pass of the data holds every step (the trainer caps an epoch at one pass), twice
            # over: a job gone smaller (--min-hosts) keeps its global batch (2 of 3 ranks: 2 x 2
            # micro-batches of 6), or the nearest a whole number of micro-batches makes, which can be larger
            [
                PY,
                "-m",
                "launcher.workloads.cifar10_synth",
                data,
                "--train",
                str(2 * args.steps * 8 * ACTIVE),
                "--test",
                "100",
            ],
            check=True,
            capture_output=True,
        )
        if args.side_by_side:
            side = side_by_side(args, kinds, work, data)
            print(f"\nload average after: {os.getloadavg()[0]:.2f}")
            ok = side is not None and side["code"] == 0 and side["final"] is not None
            return 0 if ok and len(side["faults"]) == len(kinds) else 1  # type: ignore[arg-type,index]  # run_job's dict
        with NamespaceCluster(ACTIVE + 1, slots=1) as c:
            flags = mslaunch_flags(args)
            free = run_job("fault-free", c, work, data, args.steps, flags, ACTIVE + 1, ckpt_every=args.ckpt_every)
            assert free["code"] == 0 and free["final"] is not None, free["err"]
            rate = args.steps / float(free["wall"])  # type: ignore[arg-type]  # run_job's dict: a float
            timed = [k for k in kinds if k != "restart"]
            at = [max(1, int((i + 1) * args.every * rate)) for i in range(len(timed))]
            print(f"fault-free: {free['wall']:.1f} s for {args.steps} steps ({rate:.2f} steps/s, start-up included)")
            print(f"stream: {kinds}, at new steps {at} (one per {args.every:g} s of fault-free time), seed {args.seed}")
            faulty = run_job(
                "faulty", c, work, data, args.steps, flags, ACTIVE + 1, (kinds, at, args.seed), args.ckpt_every
            )
            report(f"mslaunch (defaults and {' '.join(flags)}, one spare host)", faulty, free)
            if args.also:
                extra = shlex.split(args.also)
                also = run_job(
                    "faulty-also", c, work, data, args.steps, flags + extra, ACTIVE + 1, (kinds, at, args.seed),
                    args.ckpt_every,
                )  # fmt: skip
                report(f"mslaunch as above, with {' '.join(extra)}", also, free)
            if not args.no_baseline:
                base_flags = [
                    "--cold-restarts",
                    "--no-zygote",
                    "--env",
                    "MS_COMPILER_CACHE_ENABLE=0",
                    "--stopped-timeout",
                    "off",
                    "--hang-timeout",
                    "off",
                    "--straggler",
                    "off",
                ]
                base = run_job("baseline", c, work, data, args.steps, base_flags, ACTIVE, (kinds, at, args.seed))
                report("baseline (cold restarts, no watch beyond MindSpore's timeouts, no spare)", base, free)
        print(f"\nload average after: {os.getloadavg()[0]:.2f}")
        injected = len(faulty["faults"]) == len(kinds)  # type: ignore[arg-type]  # run_job's dict: the faults
        return 0 if faulty["code"] == 0 and faulty["final"] is not None and injected else 1
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
