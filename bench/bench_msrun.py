"""mslaunch as a drop-in for msrun: the same command lines, timed against msrun in one run.

(a) MindSpore's docs' 8-worker sample shape: ``--worker_num=8 --local_worker_num=8
    --master_port=P --log_dir=D --join=True --cluster_time_out=300 net.py``, where net.py is a
    small data-parallel training job (a dense net, 2 epochs of sharded batches) on a tiny
    MNIST-format set (idx files) generated here.  Target: mslaunch / msrun <= 0.70.
(b) the 2-worker AllReduce (``launcher/workloads/allreduce_smoke.py``).  Target <= 0.55.

Each round runs msrun, mslaunch's default path (no flag) and every opt-in path
(``--script-scheduler``: the zygote, but the scheduler runs the user's script as a plain process;
``--no-zygote``: one process per rank; ``--bind-core True``: each rank pinned to its own cores;
``--no-zygote --bind-core True``: the old default) back to back with the same command line (only ``msrun``
replaced by ``python -m launcher run``); the order rotates between rounds so that load on this
shared machine hits all of them.  Every round is printed, then per path the median, its ratio
against msrun's median, and the spread (the slowest run / the median: the default path's target
is <= 1.5).  Each run is checked: exit code 0, and every worker's log has its result line.
``uptime`` is printed before and after (the machine is shared).

Usage: python bench/bench_msrun.py [--rounds 3] [--only a|b] [--paths default,no-zygote,...] [-- extra mslaunch flags]
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Sequence, Tuple

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = sys.executable
BIN = os.path.dirname(PY)

TRAIN_SCRIPT = r'''
"""Data-parallel training on an MNIST-format set (idx files in $MNIST_DIR)."""
import os, struct, sys
import numpy as np
import mindspore as ms
import mindspore.dataset as ds
from mindspore import nn
from mindspore.communication import get_group_size, get_rank, init

ms.set_context(mode=ms.GRAPH_MODE)
ms.set_device("CPU")
init()
rank, size = get_rank(), get_group_size()
ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)


def read_idx(path):
    with open(path, "rb") as fh:
        magic, = struct.unpack(">I", fh.read(4))
        dims = struct.unpack(">" + "I" * (magic & 0xFF), fh.read(4 * (magic & 0xFF)))
        return np.frombuffer(fh.read(), dtype=np.uint8).reshape(dims)


root = os.environ["MNIST_DIR"]
images = read_idx(os.path.join(root, "train-images-idx3-ubyte")).astype(np.float32).reshape(-1, 784) / 255.0
labels = read_idx(os.path.join(root, "train-labels-idx1-ubyte")).astype(np.int32)


class Items:
    def __getitem__(self, i):
        return images[i], np.array(labels[i], dtype=np.int32)  # arrays, not numpy scalars (numpy 2)

    def __len__(self):
        return len(labels)


data = ds.GeneratorDataset(Items(), ["image", "label"], shuffle=False, num_shards=size, shard_id=rank).batch(16, drop_remainder=True)
net = nn.SequentialCell([nn.Dense(784, 64), nn.ReLU(), nn.Dense(64, 10)])
loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
step = nn.TrainOneStepCell(nn.WithLossCell(net, loss), nn.SGD(net.trainable_params(), 0.1))
step.set_train()
last = None
for epoch in range(2):
    for image, label in data.create_tuple_iterator():
        last = float(step(image, label).asnumpy())
print(f"mnist rank={rank} size={size} loss={last:.4f}", flush=True)
'''


def write_mnist(folder: str, n: int = 512, seed: int = 0) -> None:
    """A tiny MNIST-format training set: ``n`` 28x28 uint8 images (idx3) and labels (idx1);
    each label's images carry a bright stripe at a label-dependent row, so it is learnable."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, size=n, dtype=np.uint8)
    images = rng.integers(0, 64, size=(n, 28, 28), dtype=np.uint8)
    for i, lab in enumerate(labels):
        images[i, 2 + 2 * int(lab), :] = 255
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "train-images-idx3-ubyte"), "wb") as fh:
        fh.write(struct.pack(">IIII", 0x00000803, n, 28, 28) + images.tobytes())
    with open(os.path.join(folder, "train-labels-idx1-ubyte"), "wb") as fh:
        fh.write(struct.pack(">II", 0x00000801, n) + labels.tobytes())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def bench_env(mnist: str) -> dict:
    e = dict(os.environ)
    e["PATH"] = BIN + os.pathsep + e.get("PATH", "")  # msrun runs the bare `python` on PATH
    e["PYTHONPATH"] = ROOT + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    e["MNIST_DIR"] = mnist
    return e


def timed(cmd: Sequence[str], cwd: str, env: dict) -> Tuple[float, int]:
    start = time.time()
    rc = subprocess.run(
        list(cmd), cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=900
    ).returncode
    return time.time() - start, rc


def check(log_dir: str, n: int, marker: str) -> None:
    for rank in range(n):
        path = os.path.join(log_dir, f"worker_{rank}.log")
        text = open(path, errors="replace").read() if os.path.exists(path) else ""
        if marker not in text:
            raise SystemExit(f"result line {marker!r} missing in {path}")


#: The paths timed against msrun: name -> mslaunch flags ("default": none).
PATHS: Dict[str, List[str]] = {
    "default": [],
    "script-scheduler": ["--script-scheduler"],
    "no-zygote": ["--no-zygote"],
    "bind-core": ["--bind-core", "True"],
    "no-zygote+bind-core": ["--no-zygote", "--bind-core", "True"],
}


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"


def rounds(
    name: str, n: int, script: str, marker: str, runs: int, work: str, env: dict, extra: List[str], paths: Sequence[str]
) -> Dict[str, List[float]]:
    """``runs`` rounds of msrun and every mslaunch path (order rotating); the times per path."""
    times: Dict[str, List[float]] = {"msrun": []}
    times.update({p: [] for p in paths})
    for i in range(runs):
        flags = [
            f"--worker_num={n}",
            f"--local_worker_num={n}",
            f"--master_port={free_port()}",
            "--join=True",
            "--cluster_time_out=300",
        ]

        def make(who: str, d: str) -> List[str]:
            if who == "msrun":
                return [os.path.join(BIN, "msrun")] + flags + [f"--log_dir={d}", script]
            return [PY, "-m", "launcher", "run"] + flags + [f"--log_dir={d}"] + PATHS[who] + extra + [script]

        order = list(times)
        order = order[i % len(order) :] + order[: i % len(order)]
        got = {}
        for who in order:
            d = os.path.join(work, f"{name}_{who}_{i}")
            t, rc = timed(make(who, d), work, env)
            if rc != 0:
                raise SystemExit(f"{who} exited {rc}; logs in {d}")
            check(d, n, marker)
            got[who] = t
            times[who].append(t)
        msr = got["msrun"]
        print(
            f"    round {i + 1} ({order[0]} first): msrun {msr:.2f} s; "
            + "; ".join(f"{p} {got[p]:.2f} s ({got[p] / msr:.2f})" for p in paths),
            flush=True,
        )
    return times


def report(part: str, target: float, times: Dict[str, List[float]]) -> None:
    med = {k: statistics.median(v) for k, v in times.items()}
    msr = med["msrun"]
    print(
        f"({part}) medians (ratio to msrun's; slowest run / median), target for default <= {target:.2f}, spread <= "
        "1.50:"
    )
    for who, m in med.items():
        ratio = "" if who == "msrun" else f", ratio {m / msr:.2f}"
        print(
            f"    {who:<22} {m:6.2f} s{ratio}; spread {max(times[who]) / m:.2f}; runs "
            f"{', '.join(f'{t:.1f}' for t in times[who])}"
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", "--pairs", type=int, default=3)
    ap.add_argument("--only", choices=["a", "b"])
    ap.add_argument("--paths", default=",".join(PATHS), help=f"comma-separated, from {', '.join(PATHS)}")
    ap.add_argument("extra", nargs="*", help="extra mslaunch flags (after --)")
    args = ap.parse_args()
    paths = [p for p in args.paths.split(",") if p]
    unknown = [p for p in paths if p not in PATHS]
    if unknown:
        raise SystemExit(f"--paths: unknown {', '.join(unknown)}; use {', '.join(PATHS)}")
    work = tempfile.mkdtemp(prefix="mslaunch-bench-msrun-")
    print(f"load before: {uptime()}", flush=True)
    try:
        mnist = os.path.join(work, "mnist")
        write_mnist(mnist)
        env = bench_env(mnist)
        net = os.path.join(work, "net.py")
        with open(net, "w") as fh:
            fh.write(TRAIN_SCRIPT)
        results = []
        if args.only in (None, "b"):
            print(f"(b) 2-worker AllReduce, {args.rounds} rounds", flush=True)
            smoke = os.path.join(ROOT, "launcher", "workloads", "allreduce_smoke.py")
            results.append(
                ("b", 0.55, rounds("allreduce2", 2, smoke, "sum=3", args.rounds, work, env, args.extra, paths))
            )
        if args.only in (None, "a"):
            print(f"(a) 8-worker data-parallel MNIST-format job, {args.rounds} rounds", flush=True)
            results.append(
                ("a", 0.70, rounds("mnist8", 8, net, "mnist rank=", args.rounds, work, env, args.extra, paths))
            )
        for part, target, times in results:
            report(part, target, times)
        print(f"load after: {uptime()}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
