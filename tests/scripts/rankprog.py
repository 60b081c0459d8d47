"""A stand-in rank for process-level tests (no MindSpore).

Every process records its pid and the pid of a child ``sleep`` it starts (same process group)
in ``$PIDDIR/<name>.pids``, so tests can check that nothing survives.  The scheduler role
listens on MS_SCHED_PORT like MindSpore's.  Behaviour per rank from argv:

    rankprog.py MODE [SECONDS] [TARGET_RANK] [CODE]

MODE: ok (sleep SECONDS, exit 0) | fail (TARGET_RANK exits CODE after SECONDS) |
      sigkill (TARGET_RANK kills itself with SIGKILL after SECONDS) | hang |
      stubborn (ignore SIGTERM, sleep forever) | failonce (TARGET_RANK fails with CODE unless
      $PIDDIR/failed-once exists; creates it) | env (print the env as K=V lines, then cwd=...,
      cpus=<its CPU affinity> and argv=<JSON list>, exit 0) | deaf (like fail, but the
      scheduler never listens: a worker fails while the scheduler's port is still awaited) |
      ckptfail (like ok, but TARGET_RANK first reports a checkpoint it could not write)

The first line is ``<name> started pid=<pid> netns=<inode of its network namespace>``; the
scheduler listens on ``MS_SCHED_HOST`` (127.0.0.1 if unset).
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time

mode = sys.argv[1]
secs = float(sys.argv[2]) if len(sys.argv) > 2 else 0.2
target = sys.argv[3] if len(sys.argv) > 3 else "1"
code = int(sys.argv[4]) if len(sys.argv) > 4 else 3
role = os.environ.get("MS_ROLE", "")
rank = os.environ.get("RANK_ID", "sched")
name = "scheduler" if role == "MS_SCHED" else f"rank{rank}"
piddir = os.environ.get("PIDDIR")
child = subprocess.Popen(["sleep", "300"])
if piddir:
    with open(os.path.join(piddir, f"{name}.pids"), "w") as fh:
        fh.write(f"{os.getpid()}\n{child.pid}\n")
try:
    netns = os.stat("/proc/self/ns/net").st_ino
except OSError:
    netns = 0
print(f"{name} started pid={os.getpid()} netns={netns}", flush=True)

if role == "MS_SCHED" and mode == "deaf":
    time.sleep(600)
if role == "MS_SCHED":
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((os.environ.get("MS_SCHED_HOST", "127.0.0.1"), int(os.environ["MS_SCHED_PORT"])))
    sock.listen(16)
    time.sleep(600)

if mode == "env":
    for k, v in sorted(os.environ.items()):
        print(f"{k}={v}")
    print(f"cwd={os.getcwd()}")
    print("cpus=" + ",".join(str(c) for c in sorted(os.sched_getaffinity(0))))
    print("argv=" + json.dumps(sys.argv[1:]), flush=True)
    sys.exit(0)
if mode == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(600)
if mode == "hang":
    time.sleep(600)
if mode in ("fail", "sigkill", "failonce", "deaf") and rank == target:
    time.sleep(secs)
    if mode == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "failonce":
        marker = os.path.join(piddir or ".", "failed-once")
        if os.path.exists(marker):
            print(f"{name} second attempt ok", flush=True)
            sys.exit(0)
        open(marker, "w").close()
    print(f"RuntimeError: {name} fails with {code}", flush=True)
    sys.exit(code)
if mode in ("fail", "sigkill", "deaf"):
    time.sleep(600)  # the others wait to be torn down
if mode == "ckptfail" and rank == target:
    print('MSLAUNCH_METRIC {"ckpt_failed": "[Errno 28] No space left on device"}', flush=True)
time.sleep(secs)
print(f"{name} done", flush=True)
