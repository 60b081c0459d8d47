"""A rank for fault tests that leaves descendants a process-group kill cannot reach.

    escaper.py MARKER MODE [ARG...]

Every process it creates carries MARKER in its command line (``argv[0]`` of ``sleep``), so a
test finds all of them through /proc, recorded or not:

* a child ``sleep`` in the rank's own process group;
* a grandchild that left through a double fork and ``setsid`` (re-parented, own session).

The scheduler role listens on ``MS_SCHED_PORT``.

MODE: ``hang`` (sleep forever) | ``leave`` (rank ``ARG`` exits 0 at once after starting its
descendants, the others hang) | ``first`` (rank 0 exits 3 once ``$PIDDIR/ready`` exists; rank 1
creates it, waits until rank 0 has exited, and exits 4 right away) | ``segv`` (rank ``ARG``
kills itself with SIGSEGV after 0.5 s, the others hang).
"""

import os
import signal
import sys
import time

marker, mode = sys.argv[1], sys.argv[2]
arg = sys.argv[3] if len(sys.argv) > 3 else "1"
rank = os.environ.get("RANK_ID", "sched")
piddir = os.environ.get("PIDDIR", "")


def sleeper(tag):
    os.execvp("sleep", [f"{marker}-{tag}", "600"])


if os.environ.get("MS_ROLE") == "MS_SCHED":  # listen like MindSpore's scheduler
    import socket

    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind((os.environ.get("MS_SCHED_HOST", "127.0.0.1"), int(os.environ["MS_SCHED_PORT"])))
    listener.listen(16)
if os.fork() == 0:
    sleeper("child")
mid = os.fork()
if mid == 0:
    os.setsid()
    if os.fork() == 0:
        sleeper("orphan")
    os._exit(0)
os.waitpid(mid, 0)


def gone(pid):
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


if mode == "leave" and rank == arg:
    sys.exit(0)
if mode == "segv" and rank == arg:
    time.sleep(0.5)
    os.kill(os.getpid(), signal.SIGSEGV)
if mode == "first" and rank in ("0", "1"):
    ready = os.path.join(piddir, "ready")
    if rank == "0":
        with open(os.path.join(piddir, "rank0.pid"), "w") as fh:
            fh.write(str(os.getpid()))
        while not os.path.exists(ready):
            time.sleep(0.005)
        os._exit(3)
    pidfile = os.path.join(piddir, "rank0.pid")
    while not os.path.exists(pidfile):
        time.sleep(0.005)
    time.sleep(0.05)
    pid = int(open(pidfile).read())
    open(ready, "w").close()
    while not gone(pid):
        pass
    os._exit(4)
while True:
    time.sleep(60)
