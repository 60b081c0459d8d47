"""A stand-in rank for hang tests (no MindSpore).

    hangprog.py lines EVERY COUNT          print COUNT plain lines EVERY s apart, then go quiet (forever)
    hangprog.py steps EVERY COUNT [--stall-rank R --stall-at K]
                                           print ``epoch: 0, step: N, loss is ...`` lines; rank R blocks
                                           in stuck_reading_data() at step K, the others in wait_for_peers()
                                           (--collective-timeout: they print MindSpore's ring error, exit 1)
                                           [--stop-rank R --stop-at K]
                                           (attempt 0) rank R stops itself (SIGSTOP) at step K, the others
                                           wait in wait_for_peers()
    hangprog.py fail-at STEP [EVERY]       steps 1.. then exit 3 at STEP (every attempt)

The scheduler role (MS_ROLE=MS_SCHED) listens on MS_SCHED_PORT until SIGTERM.  Each process writes
its pid to ``$PIDDIR/<name>.pids`` and MSLAUNCH_ATTEMPT to ``$PIDDIR/<name>.attempt<k>``.
"""

import os
import signal
import socket
import sys
import time

role = os.environ.get("MS_ROLE", "")
rank = int(os.environ.get("RANK_ID", "0")) if role != "MS_SCHED" else -1
name = "scheduler" if role == "MS_SCHED" else f"rank{rank}"
piddir = os.environ.get("PIDDIR")
attempt = os.environ.get("MSLAUNCH_ATTEMPT", "-")
if piddir:
    with open(os.path.join(piddir, f"{name}.pids"), "a") as fh:
        fh.write(f"{os.getpid()}\n")
    open(os.path.join(piddir, f"{name}.attempt{attempt}"), "w").close()

if role == "MS_SCHED":
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((os.environ.get("MS_SCHED_HOST", "127.0.0.1"), int(os.environ["MS_SCHED_PORT"])))
    srv.listen(16)
    while True:
        time.sleep(3600)


def stuck_reading_data():
    while True:
        time.sleep(3600)


def wait_for_peers():
    while True:
        time.sleep(3600)


mode = sys.argv[1]
if mode == "lines":
    every, count = float(sys.argv[2]), int(sys.argv[3])
    for i in range(count):
        print(f"{name}: still compiling, part {i}", flush=True)
        time.sleep(every)
    wait_for_peers()
elif mode == "steps":
    every, count = float(sys.argv[2]), int(sys.argv[3])
    stall_rank = int(sys.argv[sys.argv.index("--stall-rank") + 1]) if "--stall-rank" in sys.argv else -1
    stall_at = int(sys.argv[sys.argv.index("--stall-at") + 1]) if "--stall-at" in sys.argv else -1
    stop_rank = int(sys.argv[sys.argv.index("--stop-rank") + 1]) if "--stop-rank" in sys.argv else -1
    stop_at = int(sys.argv[sys.argv.index("--stop-at") + 1]) if "--stop-at" in sys.argv else -1
    for step in range(count):
        if step == stop_at and attempt in ("0", "-"):
            if rank == stop_rank:
                os.kill(os.getpid(), signal.SIGSTOP)  # as `kill -STOP` from outside: no exit, no output
            wait_for_peers()
        if step == stall_at:
            if rank == stall_rank and attempt in ("0", "-"):
                stuck_reading_data()
            elif attempt in ("0", "-"):
                time.sleep(every * 3)  # a moment later than the stuck rank: its last line is later
                print(f"{name}: waiting for the others at step {step}", flush=True)
                if "--collective-timeout" in sys.argv:  # as MindSpore's CPU ring AllReduce gives up
                    time.sleep(every * 3)
                    print(
                        f"[ERROR] DEVICE: Ring ReduceScatter wait receiving from rank {stall_rank} failed", flush=True
                    )
                    sys.exit(1)
                wait_for_peers()
        print(f"epoch: 0, step: {step}, loss is {2.0 / (step + 1):.4f}", flush=True)
        time.sleep(every)
elif mode == "fail-at":
    stop = int(sys.argv[2])
    every = float(sys.argv[3]) if len(sys.argv) > 3 else 0.05
    for step in range(1, stop):
        print(f"epoch: 1 step: {step}, loss is 1.0", flush=True)
        time.sleep(every)
    sys.exit(3)
