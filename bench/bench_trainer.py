"""Benchmark: is the ResNet-50 trainer's input pipeline fast enough?

Measures, in one process and one run, the images/s of

* **compute**: the trainer's compiled train step (ResNet-50, expanded softmax cross-entropy,
  Momentum) fed the same in-memory batch again and again (the anchor: no input pipeline), and
* **train**: the same train step fed by the trainer's real input pipeline (CIFAR-10 binary files
  on disk -> crop/flip/rescale/normalize/HWC2CHW -> shuffle -> batch),

at 32x32, batch 32, after a warm-up (graph compile + a few steps of each). The two are measured in
alternating rounds (so a load change on a shared machine hits both) and each figure is the median
of ``--rounds`` (>= 3) rounds of ``--steps`` steps; the ratio is the median over adjacent
(compute, train) pairs. Target: train / compute >= 0.9. On a shared machine wall-clock figures
move with other people's load, so the script also prints the process CPU time per step of both
paths: their difference is the pipeline's own cost, whatever else runs.

With ``--workers2`` it also starts a 2-worker dynamic cluster itself (one ``MS_SCHED`` and two
``MS_WORKER`` processes of ``python -m launcher.workloads.resnet50_cifar10`` on 127.0.0.1 and a
free port), and reports the per-rank and total images/s the trainer prints for its last epoch.
:func:`run_dynamic_cluster` is reusable (e.g. to compare against ``mslaunch`` later).

Usage::

    python bench/bench_trainer.py [--rounds 5] [--steps 6] [--workers2] [--data-path DIR]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence, Tuple


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_dynamic_cluster(
    trainer_args: Sequence[str],
    n_workers: int = 2,
    timeout: float = 600.0,
    module: str = "launcher.workloads.resnet50_cifar10",
    extra_env: Optional[Dict[str, str]] = None,
) -> Tuple[float, List[Tuple[int, str]]]:
    """Start one scheduler and ``n_workers`` workers of ``python -m module trainer_args`` on
    127.0.0.1 (a free port; fast registration retries), wait for all of them.

    Returns:
        (wall seconds until every worker exited, [(exit code, stdout+stderr) per worker by rank]).
        The scheduler is waited for (and killed after 60 s if it lingers) but not reported.

    Every process runs in its own session; on timeout each one's process group is killed
    (SIGTERM, then SIGKILL) by pid.
    """
    base = dict(os.environ)
    base.update(
        MS_WORKER_NUM=str(n_workers),
        MS_SCHED_HOST="127.0.0.1",
        MS_SCHED_PORT=str(_free_port()),
        MS_RETRY_INTERVAL_LOWER="0",
        MS_RETRY_INTERVAL_UPPER="1",
    )
    if extra_env:
        base.update(extra_env)
    argv = [sys.executable, "-m", module, *trainer_args]
    procs: List[subprocess.Popen] = []
    logs = []

    def start(role: str, node: Optional[int]) -> None:
        env = dict(base, MS_ROLE=role)
        if node is not None:
            env["MS_NODE_ID"] = str(node)
        log = tempfile.TemporaryFile()
        logs.append(log)
        procs.append(subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))

    t0 = time.perf_counter()
    start("MS_SCHED", None)
    for rank in range(n_workers):
        start("MS_WORKER", rank)
    try:
        deadline = t0 + timeout
        for p in procs[1:]:
            p.wait(timeout=max(1.0, deadline - time.perf_counter()))
        wall = time.perf_counter() - t0
        procs[0].wait(timeout=60)
    except subprocess.TimeoutExpired:
        wall = time.perf_counter() - t0
    finally:
        for p in procs:
            if p.poll() is None:
                _kill_group(p)
    out = []
    for p, log in zip(procs[1:], logs[1:]):
        log.seek(0)
        out.append((p.returncode, log.read().decode(errors="replace")))
    for log in logs:
        log.close()
    return wall, out


def _kill_group(p: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            return
        try:
            p.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def bench_single(data_path: str, rounds: int, steps: int, batch: int, image_size: int) -> Dict[str, float]:
    """Compute-only vs pipeline-fed images/s of one process (medians over ``rounds``)."""
    import mindspore as ms
    import mindspore.dataset as ds
    import numpy as np
    from mindspore import Tensor

    from launcher.workloads import cifar10_data
    from launcher.workloads import resnet50_cifar10 as rn
    from launcher.workloads.resnet50 import resnet50

    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    ms.set_seed(1)
    ds.config.set_seed(1)
    net = resnet50(10)
    _, step_fn = rn.make_train_step(net)
    source, _ = cifar10_data.open_cifar10(data_path, "train", shuffle=True)
    data = cifar10_data.build_pipeline(source, batch, image_size, train=True)
    it = data.repeat().create_tuple_iterator(num_epochs=1)
    rng = np.random.default_rng(0)
    fixed_x = Tensor(rng.standard_normal((batch, 3, image_size, image_size), dtype=np.float32))
    fixed_y = Tensor(rng.integers(0, 10, size=batch, dtype=np.int32))

    def cpu_s() -> float:
        ru = resource.getrusage(resource.RUSAGE_SELF)
        return ru.ru_utime + ru.ru_stime

    def compute_round() -> Tuple[float, float]:
        t, c = time.perf_counter(), cpu_s()
        for _ in range(steps):
            step_fn(fixed_x, fixed_y).asnumpy()
        return time.perf_counter() - t, cpu_s() - c

    def train_round() -> Tuple[float, float]:
        t, c = time.perf_counter(), cpu_s()
        for _ in range(steps):
            x, y = next(it)
            step_fn(x, y).asnumpy()
        return time.perf_counter() - t, cpu_s() - c

    t = time.perf_counter()
    step_fn(fixed_x, fixed_y).asnumpy()
    compile_s = time.perf_counter() - t
    for _ in range(3):  # warm-up: both paths, pipeline threads started and prefetching
        step_fn(fixed_x, fixed_y).asnumpy()
        x, y = next(it)
        step_fn(x, y).asnumpy()
    compute_m: List[Tuple[float, float]] = []
    train_m: List[Tuple[float, float]] = []
    for r in range(rounds):
        # Pairs of adjacent rounds, the order alternating: a load change on a shared machine
        # hits both sides of a pair about equally; the ratio is the median over pairs.
        if r % 2 == 0:
            compute_m.append(compute_round())
            train_m.append(train_round())
        else:
            train_m.append(train_round())
            compute_m.append(compute_round())
        print(
            f"  round {r + 1}: compute {steps * batch / compute_m[-1][0]:.1f} img/s, "
            f"train {steps * batch / train_m[-1][0]:.1f} img/s",
            flush=True,
        )
    images = steps * batch
    return {
        "compile_s": compile_s,
        "compute": images / statistics.median(w for w, _ in compute_m),
        "train": images / statistics.median(w for w, _ in train_m),
        "ratio": statistics.median(cw / tw for (cw, _), (tw, _) in zip(compute_m, train_m)),
        "compute_cpu_per_step": statistics.median(c for _, c in compute_m) / steps,
        "train_cpu_per_step": statistics.median(c for _, c in train_m) / steps,
    }


def bench_workers2(data_path: str, steps: int, batch: int, image_size: int) -> Optional[Dict[str, float]]:
    """Throughput of a 2-worker dynamic cluster (the trainer's own last-epoch figures)."""
    args = [
        "--data-path",
        data_path,
        "--image-size",
        str(image_size),
        "--batch-size",
        str(batch),
        "--epochs",
        "2",
        "--steps-per-epoch",
        str(steps),
        "--log-every",
        str(steps),
    ]
    wall, results = run_dynamic_cluster(args, n_workers=2)
    per_rank, total = [], []
    for rank, (code, out) in enumerate(results):
        found = re.findall(r"epoch 2 throughput: ([\d.]+) img/s per rank, ([\d.]+) img/s total", out)
        if code != 0 or not found:
            print(f"  worker {rank} failed (exit {code}); last lines:\n" + "\n".join(out.splitlines()[-15:]))
            return None
        per_rank.append(float(found[-1][0]))
        total.append(float(found[-1][1]))
    return {"wall_s": wall, "per_rank": statistics.mean(per_rank), "total": sum(per_rank)}


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5, help="measurement rounds per path (>= 3; median)")
    p.add_argument("--steps", type=int, default=6, help="steps per round")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--image-size", type=int, default=32)
    p.add_argument("--data-path", default=None, help="CIFAR-10 binary data (default: synthetic, 2000 images)")
    p.add_argument("--workers2", action="store_true", help="also run a 2-worker dynamic cluster")
    args = p.parse_args(argv)
    if args.rounds < 3:
        p.error("--rounds must be >= 3")
    with tempfile.TemporaryDirectory(prefix="bench-trainer-") as tmp:
        data_path = args.data_path
        if data_path is None:
            from launcher.workloads.cifar10_synth import write_synthetic_cifar10

            data_path = write_synthetic_cifar10(tmp, train=2000, test=100, seed=0)
        load0 = os.getloadavg()[0]
        print(
            f"single process, {args.image_size}x{args.image_size}, batch {args.batch_size}, "
            f"{args.rounds} rounds x {args.steps} steps:",
            flush=True,
        )
        r = bench_single(data_path, args.rounds, args.steps, args.batch_size, args.image_size)
        print(f"compile (first step): {r['compile_s']:.1f} s")
        print(f"compute only (in-memory batch): {r['compute']:.1f} img/s ({args.batch_size / r['compute']:.3f} s/step)")
        print(f"train (input pipeline):         {r['train']:.1f} img/s ({args.batch_size / r['train']:.3f} s/step)")
        print(
            f"ratio train/compute (median over adjacent pairs): {r['ratio']:.3f} "
            f"(target >= 0.9: {'OK' if r['ratio'] >= 0.9 else 'BELOW'})"
        )
        print(
            f"process CPU per step: compute {r['compute_cpu_per_step']:.3f} s, train "
            f"{r['train_cpu_per_step']:.3f} s (pipeline overhead "
            f"{100 * (r['train_cpu_per_step'] / r['compute_cpu_per_step'] - 1):+.1f}%, independent of other load)"
        )
        print(
            f"load average (1 min) before/after: {load0:.2f} / {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores",
            flush=True,
        )
        if args.workers2:
            print(f"2-worker dynamic cluster ({args.steps} steps/epoch, last of 2 epochs):", flush=True)
            w = bench_workers2(data_path, args.steps, args.batch_size, args.image_size)
            if w is not None:
                print(
                    f"2 workers: {w['per_rank']:.1f} img/s per rank, {w['total']:.1f} img/s total "
                    f"(vs {r['train']:.1f} img/s for 1 process; x{w['total'] / r['train']:.2f}); "
                    f"wall {w['wall_s']:.1f} s"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
