"""The ``train.py`` (and ``net.py``) that the docs' command lines run under the docs tests.

A stand-in for a MindSpore training script, without MindSpore: under the dynamic method the
scheduler role listens on ``MS_SCHED_PORT`` as MindSpore's ``init()`` does and waits to be
ended; a worker prints the tutorials' LossMonitor lines (``epoch: E step: S, loss is L``) for
``--steps N`` steps a second apart by ``--step-time`` (defaults 5 and 0.2 s), then exits 0.
Every other argument (``--epochs 3``, ...) is accepted and ignored, as a real script's would be.
"""
import os
import socket
import sys
import time


def _opt(name: str, default: float) -> float:
    args = sys.argv[1:]
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return float(args[i + 1])
        if arg.startswith(name + "="):
            return float(arg.split("=", 1)[1])
    return default


if os.environ.get("MS_ROLE") == "MS_SCHED":
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((os.environ.get("MS_SCHED_HOST", "127.0.0.1"), int(os.environ["MS_SCHED_PORT"])))
    sock.listen(64)
    print("scheduler listening", flush=True)
    time.sleep(3600)
    sys.exit(0)

steps = int(_opt("--steps", 5))
pause = _opt("--step-time", 0.2)
rank = os.environ.get("RANK_ID", "0")
for step in range(1, steps + 1):
    time.sleep(pause)
    print(f"epoch: 1 step: {step}, loss is {2.0 / step:.4f}", flush=True)
print(f"rank {rank} done", flush=True)
