"""Benchmark: does mslaunch give MindSpore CPU ranks the machine's real speed?

Runs the reference trainer (ResNet-50, CIFAR-10 binary, 32x32, batch 32; epoch 2's throughput,
after epoch 1 has compiled and warmed up) through ``mslaunch run`` and prints, in one run:

1. **the probe**: its figures on this CPU (per ISA setting: conv/matmul GFLOPS and oneDNN's
   implementation), the decision, and its own cost (a fresh probe, cache ignored);
2. **one process**: project defaults (``--np 1``, ``--cpu-tune auto``) against every manual
   ISA setting the probe knows (``--cpu-tune off`` with ``ONEDNN_MAX_CPU_ISA`` unset / each cap);
   ratio = best manual / defaults (target <= 1.15);
3. **two local ranks**: total img/s with the defaults (core range and 1 thread per rank) and with
   ``--cpu-tune off`` (as before); ratios against one process with the defaults
   (target >= 0.85, goal 0.9);
4. **two local ranks with gradient accumulation** (``--grad-accum 4``: 4 micro-batches of 32 per
   rank, one AllReduce per 4): total img/s against one process with the defaults, both at the
   same per-rank (micro-)batch of 32 (target >= 0.85);
5. **what bounds two ranks here**: one process on one core with one thread (a rank's compute
   share), and the gradient AllReduce between 2 local ranks on its own (``bench/allreduce_cost.py``:
   23.5 M float32 elements, wall and CPU seconds per call). A data-parallel step of 2 ranks takes at
   least compute + AllReduce (on 2 cores the collective's CPU cannot hide behind compute), so
   ``2 x 32 / (t_compute_1_thread + t_allreduce)`` bounds the 2-rank img/s; printed as a ratio to one
   process beside the measured one; with K micro-batches per AllReduce,
   ``2 x K x 32 / (K x t_compute_1_thread + t_allreduce)``.

The configurations run in alternating rounds (``--rounds``, default 2), so a change of load on a
shared machine hits all of them; each figure is the median over rounds and every single run is
printed. Usage::

    python bench/bench_cpu.py [--rounds 2] [--steps 12] [--data-path DIR] [--grad-accum 4] [--only 'PREFIX;...']
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from launcher.execution.checks.cpu import cached_probe, local_runner  # noqa: E402  (after sys.path is set above)
from launcher.planning.cpu.probe import isa_advice  # noqa: E402  (after sys.path is set above)

_TPUT = re.compile(r"epoch 2 throughput: ([\d.]+) img/s per rank, ([\d.]+) img/s total")


def mslaunch_run(
    np: int,
    extra: Sequence[str],
    data: str,
    steps: int,
    log_dir: str,
    env: Optional[Dict[str, str]] = None,
    grad_accum: int = 1,
) -> float:
    """Run the trainer through ``mslaunch run``; epoch 2's total img/s. With ``grad_accum`` K an
    epoch is ``steps`` // K optimizer steps: the same ``steps`` batches of 32 per rank."""
    trainer = ["--grad-accum", str(grad_accum)] if grad_accum > 1 else []
    argv = [
        sys.executable,
        "-m",
        "launcher",
        "run",
        "--np",
        str(np),
        "--master-port",
        "auto",
        "--tee",
        "none",
        "--quiet",
        "--log-dir",
        log_dir,
        "--env",
        "GLOG_v=3",
        *extra,
        "-m",
        "launcher.workloads.resnet50_cifar10",
        "--data-path",
        data,
        "--image-size",
        "32",
        "--epochs",
        "2",
        "--steps-per-epoch",
        str(max(1, steps // grad_accum)),
        "--log-every",
        "1000",
        *trainer,
    ]
    p = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=1800, env=env)
    with open(os.path.join(log_dir, "worker_0.log"), encoding="utf-8", errors="replace") as f:
        found = _TPUT.findall(f.read())
    if p.returncode != 0 or not found:
        raise RuntimeError(f"mslaunch run failed ({p.returncode}): {p.stderr[-800:]}")
    return float(found[-1][1])


_COST = re.compile(r"allreduce-cost rank=\d+ elements=\d+ wall=([\d.]+) cpu=([\d.]+) sys=([\d.]+) ok=True")


def allreduce_cost(log_dir: str, env: Dict[str, str]) -> Dict[str, float]:
    """Run ``bench/allreduce_cost.py`` on 2 local ranks; rank 0's median wall/cpu/sys seconds per call."""
    argv = [
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
        "--quiet",
        "--log-dir",
        log_dir,
        "--env",
        "GLOG_v=3",
        os.path.join(ROOT, "bench", "allreduce_cost.py"),
    ]
    p = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=900, env=env)
    with open(os.path.join(log_dir, "worker_0.log"), encoding="utf-8", errors="replace") as f:
        found = _COST.findall(f.read())
    if p.returncode != 0 or not found:
        raise RuntimeError(f"mslaunch run failed ({p.returncode}): {p.stderr[-800:]}")
    wall, cpu, sys_ = (float(x) for x in found[-1])
    return {"wall": wall, "cpu": cpu, "sys": sys_}


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=12, help="steps per epoch (per rank)")
    ap.add_argument("--data-path", default=None, help="CIFAR-10 binary folder (default: a synthetic one in a temp dir)")
    ap.add_argument(
        "--grad-accum", type=int, default=4, help="K of the '2 ranks, --grad-accum K' configuration (default 4)"
    )
    ap.add_argument(
        "--only",
        default=None,
        help="';'-separated prefixes of the configurations to run (e.g. '1 process, defaults;2 ranks'); "
        "the probe and the AllReduce cost always run",
    )
    args = ap.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="bench_cpu.") as tmp:
        home = os.path.join(tmp, "home")
        env = dict(os.environ, MSLAUNCH_HOME=home, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
        for var in ("OMP_NUM_THREADS", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "MSLAUNCH_CPU_THREADS"):
            env.pop(var, None)
        data = args.data_path
        if data is None:
            data = os.path.join(tmp, "data")
            subprocess.run(
                [sys.executable, "-m", "launcher", "data", "synth-cifar10", data, "--train", "2000", "--test", "100"],
                cwd=ROOT,
                env=env,
                check=True,
                capture_output=True,
            )

        # 1. the probe, fresh (its cost is the first-run cost of a job on a new machine)
        t = time.perf_counter()
        outcome = cached_probe(local_runner(sys.executable), home, "bench", refresh=True)
        wall = time.perf_counter() - t
        if outcome.probe is None:
            print(f"probe failed: {outcome.note}")
            return 1
        p = outcome.probe
        advice = isa_advice(p)
        print(
            f"probe: {wall:.1f} s wall (import {json.load(open(outcome.path))['import_seconds']:.1f} s), "
            f"oneDNN {p.onednn} ({p.onednn_isa}), numpy matmul {p.numpy_gflops} GFLOPS"
        )
        for v in p.variants:
            name = f"ONEDNN_MAX_CPU_ISA={v.isa}" if v.isa else "default"
            figs = v.error or ", ".join(f"{k} {t.gflops:.1f} GFLOPS ({t.impl})" for k, t in v.kernels.items())
            print(f"  {name}: {figs}")
        print(f"  decision: {advice.summary}")
        # copy the probe under this machine's cache name so the runs below find it
        import socket

        from launcher.execution.checks.cpu import cache_path

        os.makedirs(os.path.dirname(cache_path(home, socket.gethostname(), p.key)), exist_ok=True)
        with (
            open(outcome.path, encoding="utf-8") as src,
            open(cache_path(home, socket.gethostname(), p.key), "w", encoding="utf-8") as dst,
        ):
            dst.write(src.read())

        accum_k = args.grad_accum
        configs: Dict[str, tuple] = {"1 process, defaults": (1, [])}
        for v in p.variants:
            if v.error is None:
                extra = ["--cpu-tune", "off"] + (["--env", f"ONEDNN_MAX_CPU_ISA={v.isa}"] if v.isa else [])
                configs[f"1 process, manual {v.isa or 'default ISA'}"] = (1, extra)
        configs["1 process, 1 core, 1 thread"] = (
            1,
            ["--bind-core", '{"device0": ["0"]}', "--env", "MSLAUNCH_CPU_THREADS=1", "--env", "OMP_NUM_THREADS=1"],
        )
        configs["2 ranks, defaults"] = (2, [])
        configs["2 ranks, --cpu-tune off"] = (2, ["--cpu-tune", "off"])
        # gradient accumulation: K micro-batches of 32 per rank, one AllReduce per K
        configs[f"2 ranks, --grad-accum {accum_k}"] = (2, [], accum_k)
        if args.only:
            wanted = [w.strip() for w in args.only.split(";") if w.strip()]
            configs = {name: c for name, c in configs.items() if any(name.startswith(w) for w in wanted)}
        runs: Dict[str, List[float]] = {k: [] for k in configs}
        allreduce: List[Dict[str, float]] = []
        for r in range(args.rounds):
            log_dir = os.path.join(tmp, f"r{r}-allreduce")
            try:
                allreduce.append(allreduce_cost(log_dir, env))
                print(
                    f"  round {r + 1} gradient AllReduce, 2 local ranks: {allreduce[-1]['wall']:.2f} s wall, "
                    f"{allreduce[-1]['cpu']:.2f} s CPU ({allreduce[-1]['sys']:.2f} s system) per rank and call "
                    f"(load {os.getloadavg()[0]:.1f})",
                    flush=True,
                )
            except RuntimeError as exc:
                print(f"  round {r + 1} gradient AllReduce: {exc}")
            for name, (np, extra, *accum) in configs.items():
                log_dir = os.path.join(tmp, f"r{r}-{len(runs[name])}-{np}-{abs(hash(name))}")
                try:
                    runs[name].append(mslaunch_run(np, extra, data, args.steps, log_dir, env, *accum))
                except RuntimeError as exc:
                    print(f"  round {r + 1} {name}: {exc}")
                    continue
                print(f"  round {r + 1} {name}: {runs[name][-1]:.1f} img/s (load {os.getloadavg()[0]:.1f})", flush=True)
        med = {k: statistics.median(v) for k, v in runs.items() if v}
        print("medians (img/s total):")
        for k, v in med.items():
            print(f"  {k}: {v:.1f}  (runs: {', '.join(f'{x:.1f}' for x in runs[k])})")
        one = med.get("1 process, defaults")
        manual = [v for k, v in med.items() if k.startswith("1 process, manual")]
        if one and manual:
            print(
                f"ratio 1 process, best manual / defaults: {max(manual):.1f} / {one:.1f} = {max(manual) / one:.2f} "
                "(target <= 1.15)"
            )
        for k in ("2 ranks, defaults", "2 ranks, --cpu-tune off"):
            if one and k in med:
                print(
                    f"ratio {k} / 1 process defaults: {med[k]:.1f} / {one:.1f} = {med[k] / one:.2f} (target >= 0.85 "
                    "with defaults)"
                )
        accum = f"2 ranks, --grad-accum {accum_k}"
        if one and accum in med:
            print(
                f"ratio {accum} / 1 process defaults (both: per-rank batch 32): {med[accum]:.1f} / {one:.1f} = "
                f"{med[accum] / one:.2f} (target >= 0.85)"
            )
        single = med.get("1 process, 1 core, 1 thread")
        if one and single and allreduce:
            t_ar = statistics.median(a["wall"] for a in allreduce)
            cpu_ar = statistics.median(a["cpu"] for a in allreduce)
            t_step = 32 / single  # the trainer's per-rank batch
            bound = 2 * 32 / (t_step + t_ar)
            print(
                f"bound for 2 ranks: one rank's step computes in {t_step:.2f} s (1 core, 1 thread: {single:.1f} "
                "img/s); "
                f"the gradient AllReduce takes {t_ar:.2f} s wall, {cpu_ar:.2f} s CPU per rank; "
                f"2 x 32 / ({t_step:.2f} + {t_ar:.2f}) = {bound:.1f} img/s = {bound / one:.2f} of 1 process"
            )
            bound_k = 2 * accum_k * 32 / (accum_k * t_step + t_ar)
            print(
                f"bound for 2 ranks with --grad-accum {accum_k}: 2 x {accum_k} x 32 / ({accum_k} x {t_step:.2f} + "
                f"{t_ar:.2f}) = "
                f"{bound_k:.1f} img/s = {bound_k / one:.2f} of 1 process"
            )
        if "2 ranks, defaults" in med and "2 ranks, --cpu-tune off" in med:
            a, b = med["2 ranks, defaults"], med["2 ranks, --cpu-tune off"]
            print(f"ratio 2 ranks, defaults / off: {a:.1f} / {b:.1f} = {a / b:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
