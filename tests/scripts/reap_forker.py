"""Runs :func:`launcher.execution.process.spawn.reap_orphans` over a descendant that keeps
forking (each child a marked sleeper, in its own session as the middle of a double fork is),
then prints how many marked processes are still alive.  Run as its own process: the reap ends
every descendant of the process that calls it.

    reap_forker.py MARKER
"""

import os
import sys
import time

from launcher.execution.process.spawn import become_subreaper, reap_orphans

marker = sys.argv[1]
become_subreaper()
forker = os.fork()
if forker == 0:
    os.setsid()
    for _ in range(2000):
        if os.fork() == 0:
            os.execvp("sleep", [f"{marker}-child", "600"])
        time.sleep(0.001)
    os._exit(0)
time.sleep(0.3)  # the forker is busy forking
killed = reap_orphans(set())


def marked():
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmd = f.read()
                with open(f"/proc/{pid}/stat") as f:
                    state = f.read().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if marker.encode() in cmd and state not in ("Z", "X") and int(pid) != os.getpid():
                out.append(int(pid))
    return out


time.sleep(0.2)
print(len(killed), len(marked()))
