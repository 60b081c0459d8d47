"""Runs one of the failure programs here as a rank of ``mslaunch run`` (dynamic cluster).

    as_rank.py PROGRAM [ARGS...]

The scheduler (``MS_ROLE=MS_SCHED``) listens on ``MS_SCHED_PORT`` until it is ended; a rank
replaces itself with ``python PROGRAM ARGS`` (same pid: the kernel's records name the pid
mslaunch started).  Each process writes its pid to ``$PIDDIR/<name>.pids`` when ``PIDDIR`` is
set.  With ``CAUSE_CGROUP`` set (a cgroup folder), a rank first moves itself into that cgroup by
writing its pid to its ``cgroup.procs``.
"""
import os
import socket
import sys
import time

role = os.environ.get("MS_ROLE", "")
name = "scheduler" if role == "MS_SCHED" else f"rank{os.environ.get('RANK_ID', '')}"
piddir = os.environ.get("PIDDIR")
if piddir:
    with open(os.path.join(piddir, f"{name}.pids"), "w") as fh:
        fh.write(f"{os.getpid()}\n")
if role == "MS_SCHED":
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((os.environ.get("MS_SCHED_HOST", "127.0.0.1"), int(os.environ["MS_SCHED_PORT"])))
    sock.listen(16)
    print("scheduler listening", flush=True)
    while True:  # until mslaunch ends it
        time.sleep(3600)
cgroup = os.environ.get("CAUSE_CGROUP")
if cgroup:
    with open(os.path.join(cgroup, "cgroup.procs"), "w") as fh:
        fh.write(f"{os.getpid()}\n")
os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
