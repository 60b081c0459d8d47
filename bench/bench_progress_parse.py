#!/usr/bin/env python3
"""Benchmark: lines per second of :func:`launcher.logs.metrics.parse_line` on 100k mixed log lines.

The parser runs on every line every rank prints, so its speed bounds the follower's CPU.  The lines
are a fixed mix (seeded): 70 % lines that are not progress (framework warnings, logger lines with
timestamps, config dumps, tracebacks, checkpoint notes, tqdm bars without a loss) and 30 % progress
lines of the formats the parser reads (MindSpore LossMonitor, MindFormers, torch-style, Megatron,
keyword counters, PyTorch's MNIST line, bare JSON, ``MSLAUNCH_METRIC``).

Prints lines per CPU second of this process (``time.process_time``: other work on a shared machine
slows the wall clock, not this figure much; best of ``--repeat`` runs of the whole set) and how many
lines parsed as a step.
Usage: python bench/bench_progress_parse.py [--lines 100000] [--repeat 3] [--progress-share 0.3]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from typing import List

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from launcher.logs.metrics import parse_line  # noqa: E402  (after sys.path is set above)

NOISE = [
    "[WARNING] ME(4711:140183,MainProcess):2026-11-25-13:00:01.123.456 [mindspore/train/model.py:1120] The step {n} of "
    "graph compile took long",
    "2026-11-26 07:21:16,{n:03d} - INFO - root - data loader worker {n} started, prefetch 2, queue 64",
    "INFO:root:saving checkpoint at step {n} to /ckpt/step_{n}.ckpt",
    "[rank0]: warmup_steps: 100, max_steps=1000, lr: 0.0{n}, weight_decay: 0.01",
    '  File "/usr/lib/python3.11/site-packages/mindspore/ops/primitive.py", line {n}, in __call__',
    "Namespace(batch_size=32, epochs=10, lr=0.01, seed={n}, data='/data/cifar10', amp_level='O2')",
    "connecting to 10.0.{n}.1:8118 (attempt 1), MindSpore version 2.3.1, CANN 8.0.RC2",
    " 45%|####5     | {n}/1000 [00:10<00:12, 80.12it/s]",
    "[INFO] RUNTIME(4711,python):2026-11-26-07:21:16.{n} [runtime.cc:88] device 0 memory: 31.5 GB free of 32 GB",
    "Train epoch time: 5312.412 ms, per step time: 132.810 ms",
]
PROGRESS = [
    "epoch: 1 step: {n}, loss is 0.0{n}",
    "2025-04-07 15:34:29,173 - INFO - {{ Epoch:[  1/  2], step:[ {n}/ 1900], loss: 10.633, per_step_time: 1752ms, lr: "
    "1e-05",
    "Epoch [1/5], Step [{n}/6000], Loss: 0.2154",
    " iteration {n}/ 100000 | consumed samples: 640 | elapsed time per iteration (ms): 3514.5 | lm loss: 1.095398E+01 "
    "| loss scale: 4096.0 |",
    "iter {n} | loss 0.6667 | lr 0.01",
    "[step {n}] loss: 0.6667",
    "Train Epoch: 1 [{n}/60000 (1%)]\tLoss: 0.2154",
    '{{"step": {n}, "loss": 0.3}}',
    'MSLAUNCH_METRIC {{"step": {n}, "loss": 0.42}}',
    "2023-05-06 19:05:07,456 - INFO - [Train] step: {n}, loss: 0.086791, lr: 0.000200",
]


def lines(count: int, seed: int = 7, share: float = 0.3) -> List[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        pool = PROGRESS if rng.random() < share else NOISE
        out.append(rng.choice(pool).format(n=rng.randint(1, 999)))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--progress-share", type=float, default=0.3, help="the share of progress lines")
    args = ap.parse_args()
    data = lines(args.lines, share=args.progress_share)
    best = float("inf")
    steps = 0
    for _ in range(args.repeat):
        start = time.process_time()
        steps = 0
        for line in data:
            m = parse_line(line)
            if m is not None and m.progress is not None:
                steps += 1
        best = min(best, time.process_time() - start)
    print(
        json.dumps(
            {"lines": len(data), "lines_per_s": round(len(data) / best), "best_s": round(best, 3), "step_lines": steps}
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
