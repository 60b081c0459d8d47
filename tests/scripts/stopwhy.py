"""A stand-in rank that says why mslaunch stops it (no MindSpore).

    stopwhy.py FAIL_RANK

On SIGTERM a worker prints ``stopping: <what $MSLAUNCH_STOPPING_FILE says>`` and exits 143; rank
FAIL_RANK exits 3 once every worker is up (each leaves ``up-<rank>`` in the working folder once it
handles SIGTERM); the others wait.  The scheduler role listens on
MS_SCHED_PORT like MindSpore's.
"""

import os
import signal
import socket
import sys
import time

if os.environ.get("MS_ROLE") == "MS_SCHED":
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((os.environ.get("MS_SCHED_HOST", "127.0.0.1"), int(os.environ["MS_SCHED_PORT"])))
    s.listen(16)
    time.sleep(600)
    sys.exit(0)


def why(signum, frame):
    try:
        with open(os.environ["MSLAUNCH_STOPPING_FILE"]) as fh:
            text = fh.read().strip()
    except (KeyError, OSError) as exc:
        text = f"unknown ({exc})"
    print(f"stopping: {text}", flush=True)
    os._exit(143)


signal.signal(signal.SIGTERM, why)
open(f"up-{os.environ['RANK_ID']}", "w").close()
if os.environ.get("RANK_ID") == sys.argv[1]:
    world = int(os.environ.get("MS_WORKER_NUM", "1"))
    while not all(os.path.exists(f"up-{r}") for r in range(world)):
        time.sleep(0.02)
    sys.exit(3)
time.sleep(600)
