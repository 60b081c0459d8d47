"""The ``train.py`` (and ``net.py``) that the docs' command lines run under the docs tests.

A stand-in for a MindSpore training script, without MindSpore: under the dynamic method the
scheduler role listens on ``MS_SCHED_PORT`` as MindSpore's ``init()`` does, every worker holds a
connection to it while it runs, and the scheduler exits once all ``MS_WORKER_NUM`` workers have
come and gone (as MindSpore's does: a launcher such as mpirun waits for it); a worker prints the tutorials' LossMonitor
lines (``epoch: E step: S, loss is L``) for
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
    expected = int(os.environ.get("MS_WORKER_NUM", "1"))
    workers = []
    sock.settimeout(600)
    while len(workers) < expected:
        conn, _ = sock.accept()
        if conn.recv(1) == b"w":  # a worker (the launcher's own readiness probe sends nothing)
            workers.append(conn)
        else:
            conn.close()
    for conn in workers:  # each closes when its worker exits
        conn.settimeout(3600)
        conn.recv(1)
    print("scheduler: every worker came and went", flush=True)
    sys.exit(0)

link = None
if os.environ.get("MS_ROLE") == "MS_WORKER":
    deadline = time.monotonic() + 60
    while link is None:
        try:
            link = socket.create_connection((os.environ["MS_SCHED_HOST"], int(os.environ["MS_SCHED_PORT"])), timeout=5)
            link.sendall(b"w")
        except OSError:
            link = None
            if time.monotonic() > deadline:
                sys.exit("could not reach the scheduler")
            time.sleep(0.1)

steps = int(_opt("--steps", 5))
pause = _opt("--step-time", 0.2)
rank = os.environ.get("RANK_ID", "0")
for step in range(1, steps + 1):
    time.sleep(pause)
    print(f"epoch: 1 step: {step}, loss is {2.0 / step:.4f}", flush=True)
print(f"rank {rank} done", flush=True)
