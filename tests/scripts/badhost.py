"""A stand-in training rank on a cluster with one bad host (no MindSpore).

    badhost.py BAD_IP STEPS

Every worker prints ``attempt=<MSLAUNCH_ATTEMPT> rank=<r> on_bad_host=<bool>`` and then one
LossMonitor line per step.  Local rank 0 of the host that owns ``BAD_IP`` (found by binding it:
only its own namespace can) kills itself with SIGKILL at step 2, in every attempt.  After step 2
every rank waits until every rank of the attempt logged step 2 (marker files in ``$PIDDIR``,
shared by the hosts), so an attempt with the bad host gets no further than step 2 (the same best
step each time: a crash loop, were it not re-planned) and an attempt without it runs to the end.
The scheduler role listens on MS_SCHED_PORT and ends once every worker said ``done``.
"""

import os
import signal
import socket
import sys
import time

from sched_done import serve_until_done, tell_done

bad_ip, steps = sys.argv[1], int(sys.argv[2])
role = os.environ.get("MS_ROLE", "")
piddir = os.environ["PIDDIR"]
attempt = os.environ.get("MSLAUNCH_ATTEMPT", "0")

if role == "MS_SCHED":
    serve_until_done()
    sys.exit(0)

rank, world = int(os.environ["RANK_ID"]), int(os.environ["RANK_SIZE"])
probe = socket.socket()
try:
    probe.bind((bad_ip, 0))
    on_bad = True
except OSError:
    on_bad = False
probe.close()
print(f"attempt={attempt} rank={rank} on_bad_host={on_bad}", flush=True)
for step in range(1, steps + 1):
    time.sleep(0.1)
    print(f"epoch: 1 step: {step}, loss is {2.0 / step:.7g}", flush=True)
    if step == 2:
        if on_bad and os.environ.get("LOCAL_RANK") == "0":
            os.kill(os.getpid(), signal.SIGKILL)
        open(os.path.join(piddir, f"a{attempt}-r{rank}-step2"), "w").close()
        while not all(os.path.exists(os.path.join(piddir, f"a{attempt}-r{r}-step2")) for r in range(world)):
            time.sleep(0.05)
tell_done()
print(f"rank{rank} done", flush=True)
