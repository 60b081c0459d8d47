"""A tiny rank program for the slurm backend tests (no MindSpore).

``prog.py MODE SECONDS`` (or ``N/M``: M seconds in a requeued run): prints its rank, node and MS_*/RANK_* env as JSON to
its log, records
its pid in ``$PROG_PIDS/<rank>`` (if set), then per MODE: ``ok`` sleeps SECONDS and exits 0,
``fail`` makes rank 3 exit 3 after 0.5 s (others sleep SECONDS), ``fail-requeued`` the same in a
requeued run only, ``hang`` ignores SIGTERM
and sleeps. The scheduler (MS_ROLE=MS_SCHED) listens on MS_SCHED_PORT until SIGTERM (it exits 0 then), or
max(SECONDS, 60) s.
"""

import json
import os
import signal
import socket
import sys
import time

mode = sys.argv[1] if len(sys.argv) > 1 else "ok"
when = sys.argv[2] if len(sys.argv) > 2 else "0.3"
first, _, again = when.partition("/")  # "N/M": N seconds, M in a requeued run (SLURM_RESTART_COUNT > 0)
seconds = float(again if again and os.environ.get("SLURM_RESTART_COUNT", "0") != "0" else first)
rank = os.environ.get("RANK_ID")
keys = sorted(
    k for k in os.environ if k.startswith(("MS_", "RANK_", "DEVICE_", "LOCAL_", "MSL_TEST_", "SLURM_RESTART"))
)
print(
    json.dumps(
        {"rank": rank, "node": socket.gethostname(), "env": {k: os.environ[k] for k in keys}, "cwd": os.getcwd()}
    ),
    flush=True,
)
if os.environ.get("PROG_PIDS"):
    with open(os.path.join(os.environ["PROG_PIDS"], str(rank if rank is not None else "sched")), "w") as fh:
        fh.write(str(os.getpid()))
if os.environ.get("MS_ROLE") == "MS_SCHED":
    # As MindSpore's scheduler: it serves until the workers are done, and mslaunch ends it then
    # (SIGTERM, after its sched_grace); it must not go before mslaunch saw its port accept, which
    # on a loaded machine can take longer than a worker's SECONDS.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", int(os.environ["MS_SCHED_PORT"])))
    srv.listen()
    time.sleep(max(seconds, 60.0))
    sys.exit(0)
if mode == "hang":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
requeued = os.environ.get("SLURM_RESTART_COUNT", "0") != "0"
if mode in ("fail", "fail-requeued") and rank == "3" and (mode == "fail" or requeued):
    time.sleep(0.5)
    sys.exit(3)
time.sleep(seconds)
