"""A stand-in training rank for a job that loses a host mid-run (no MindSpore).

    losthost.py STEPS [hold] [ARGS...]

Every worker writes ``$PIDDIR/a<MSLAUNCH_ATTEMPT>-r<rank>`` holding its host name (the test waits
for these before it takes a host away) and prints ``attempt=<a> rank=<r> host=<name>``, then
``sizes: rank_size=<RANK_SIZE> world=<MSLAUNCH_WORLD_SIZE> planned=<MSLAUNCH_PLANNED_WORLD_SIZE>``.  With
``hold``, in attempt 0 it then waits until it is ended (the test loses a host meanwhile); else
(and in a later attempt) it prints one LossMonitor line per step, tells the scheduler ``done``
(waiting for it to listen: it starts with the ranks) and ends.  Further arguments are ignored (``--device-target
Ascend`` tells mslaunch the job's
devices).  The scheduler
role listens on MS_SCHED_PORT and ends once every worker said ``done``.
"""

import os
import socket
import sys
import time

from sched_done import serve_until_done, tell_done

steps = int(sys.argv[1])
hold = sys.argv[2:3] == ["hold"]
attempt = os.environ.get("MSLAUNCH_ATTEMPT", "0")

if os.environ.get("MS_ROLE") == "MS_SCHED":
    serve_until_done()
    sys.exit(0)

rank = int(os.environ["RANK_ID"])
host = socket.gethostname()
print(f"attempt={attempt} rank={rank} host={host}", flush=True)
sizes = (os.environ.get(k, "-") for k in ("RANK_SIZE", "MSLAUNCH_WORLD_SIZE", "MSLAUNCH_PLANNED_WORLD_SIZE"))
print("sizes: rank_size={} world={} planned={}".format(*sizes), flush=True)
marker = os.path.join(os.environ["PIDDIR"], f"a{attempt}-r{rank}")
with open(marker + ".tmp", "w") as fh:
    fh.write(host)
os.replace(marker + ".tmp", marker)
while hold and attempt == "0":
    time.sleep(0.2)
for step in range(1, steps + 1):
    time.sleep(0.1)
    print(f"epoch: 1 step: {step}, loss is {2.0 / step:.7g}", flush=True)
tell_done()
print(f"rank{rank} done", flush=True)
