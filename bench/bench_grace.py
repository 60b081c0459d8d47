#!/usr/bin/env python3
"""How long a preempted rank needs between SIGTERM and SIGKILL (``--grace``): the reference
trainer's checkpoint on SIGTERM, measured, and scaled to a model of a few GB.

1. The reference trainer (``launcher.workloads.resnet50_cifar10``, one process, 32x32 synthetic
   CIFAR-10, batch 8, ``--ckpt-dir``) for each ``--archs`` network: once it logged step 3, SIGTERM;
   the time to its exit (it ends the step it is in, writes its checkpoint, ends by the signal), the
   save alone (its ``preempted: checkpoint saved in X s`` line) and the checkpoint's size.
2. ``--gb`` GB written the way the trainer writes a checkpoint (a temp file in the checkpoint's
   folder, then ``os.replace``), in 64 MiB blocks: the time to the page cache (what a process
   that ends pays), and with ``fsync`` (what a machine that goes away after it needs).

Printed: each time and its ratio to mslaunch's default ``--grace`` (and to torchrun's and Slurm's
30 s), and the grace the largest measured write would need with a 2x margin.

Usage: python bench/bench_grace.py [--archs resnet50,resnet14] [--gb 4] [--keep DIR]
Needs MindSpore for step 1 (``--archs ''`` skips it).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from launcher.execution.settings import SuperviseOptions  # noqa: E402  (after sys.path is set above)

PY = sys.executable
#: torchrun's SIGTERM -> SIGKILL wait (torch.distributed.elastic's ``_close(death_sig, timeout=30)``)
#: and Slurm's ``KillWait`` default.
OTHERS = {"torchrun": 30.0, "Slurm KillWait": 30.0}
BLOCK = 64 << 20


def trainer_on_sigterm(arch: str, data: str, work: str) -> Dict[str, object]:
    """One trainer run, SIGTERMed after step 3: seconds to exit, the save's own seconds, the checkpoint."""
    ckpt = os.path.join(work, f"ckpt-{arch}")
    argv = [PY, "-u", "-m", "launcher.workloads.resnet50_cifar10", "--arch", arch, "--data-path", data]
    argv += ["--image-size", "32", "--batch-size", "8", "--steps-per-epoch", "1000", "--workers", "1"]
    argv += ["--ckpt-dir", ckpt]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), GLOG_v="3")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    lines: List[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
        if line.startswith("epoch: 1 step: 3,"):
            break
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    rest, _ = proc.communicate(timeout=600)
    took = time.monotonic() - sent
    lines += rest.splitlines()
    saved = next(
        (float(m.group(1)) for m in map(re.compile(r"checkpoint saved in ([\d.]+) s").search, lines) if m), None
    )
    path = next((ln.split(": ", 1)[1] for ln in reversed(lines) if ln.startswith("checkpoint: ")), None)
    size = os.path.getsize(path) if path and os.path.exists(path) else None
    return {"arch": arch, "exit_s": took, "save_s": saved, "path": path, "bytes": size, "rc": proc.returncode}


def write_like_a_checkpoint(folder: str, gb: float, sync: bool) -> float:
    """Seconds to write ``gb`` GB as the trainer writes a checkpoint (temp file, then replace)."""
    block = os.urandom(BLOCK)
    total = int(gb * (1 << 30))
    tmp, final = os.path.join(folder, ".tmp-big.ckpt"), os.path.join(folder, "big.ckpt")
    t0 = time.monotonic()
    with open(tmp, "wb") as fh:
        done = 0
        while done < total:
            n = min(BLOCK, total - done)
            fh.write(block[:n])
            done += n
        if sync:
            fh.flush()
            os.fsync(fh.fileno())
    os.replace(tmp, final)
    took = time.monotonic() - t0
    os.unlink(final)
    return took


def ratios(seconds: float, grace: float) -> str:
    others = ", ".join(f"{seconds / v:.2f} of {name}'s {v:g} s" for name, v in OTHERS.items())
    return f"{seconds:6.2f} s = {seconds / grace:.2f} of --grace {grace:g} s ({others})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--archs", default="resnet50,resnet14", help="networks of the reference trainer ('' to skip)")
    ap.add_argument("--gb", type=float, default=4.0, help="GB of the scaled write (a model of a few GB)")
    ap.add_argument("--keep", default=None, help="keep the work folder here")
    args = ap.parse_args()
    grace = SuperviseOptions.grace
    work = args.keep or tempfile.mkdtemp(prefix="bench-grace-")
    os.makedirs(work, exist_ok=True)
    print(f"load average before: {os.getloadavg()[0]:.2f}; mslaunch's default --grace: {grace:g} s")
    worst: Optional[float] = None
    try:
        archs = [a for a in args.archs.split(",") if a]
        if archs:
            data = os.path.join(work, "data")
            synth = [PY, "-m", "launcher.workloads.cifar10_synth", data, "--train", "400", "--test", "20"]
            subprocess.run(synth, check=True, capture_output=True, env=dict(os.environ, PYTHONPATH=ROOT))
        saves: List[float] = []  # the trainer's save rates, MB/s
        for arch in archs:
            r = trainer_on_sigterm(arch, data, work)
            mb = (r["bytes"] or 0) / 1e6  # type: ignore[operator]  # an int or None
            print(f"\n{arch}: SIGTERM after step 3 -> exit (returncode {r['rc']}), checkpoint {mb:.0f} MB: {r['path']}")
            print(f"   SIGTERM to exit (the step in progress + the save): {ratios(float(r['exit_s']), grace)}")  # type: ignore[arg-type]  # a float
            if r["save_s"] is not None:
                save = float(r["save_s"])  # type: ignore[arg-type]  # a float
                print(f"   the save alone: {ratios(save, grace)}; {mb / max(save, 1e-6):.0f} MB/s")
                saves.append(mb / max(save, 1e-6))
        rates = [float(r) for r in saves if r]
        for sync in (False, True):
            secs = write_like_a_checkpoint(work, args.gb, sync)
            how = "with fsync (durable)" if sync else "to the page cache (the process's own cost)"
            print(f"\n{args.gb:g} GB written {how}: {ratios(secs, grace)}; {args.gb * 1024 / secs:.0f} MB/s")
            worst = secs if worst is None else max(worst, secs)
        if rates:  # MindSpore's own serialisation is slower than a plain write
            secs = args.gb * 1024 / min(rates)
            print(f"\n{args.gb:g} GB at the trainer's slowest save rate ({min(rates):.0f} MB/s): {ratios(secs, grace)}")
            worst = secs if worst is None else max(worst, secs)
        if worst is not None:
            print(f"\nthe largest write with a 2x margin needs --grace {2 * worst:.0f} s (default {grace:g} s)")
        print(f"load average after: {os.getloadavg()[0]:.2f}")
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
