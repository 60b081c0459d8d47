"""A stand-in rank that reports the variables it got, byte for byte, without printing them.

    envprobe.py [ARG...]

Environment: ``PROBE_NAMES`` (comma-separated names to report), ``PROBE_DIR`` (a folder every
host sees).  Each process (the scheduler too; it listens on ``MS_SCHED_PORT`` like MindSpore's)
prints one line ``envprobe {"name", "pid", "sha256": {NAME: hex of the UTF-8 bytes, or null when
unset}, "argv": [ARG...]}`` (a digest: a secret's value is never printed), then writes
``$PROBE_DIR/<name>.ready`` holding its pid, waits until ``$PROBE_DIR/go`` exists and exits 0.
"""

import hashlib
import json
import os
import socket
import sys
import time

role = os.environ.get("MS_ROLE", "")
name = "scheduler" if role == "MS_SCHED" else f"rank{os.environ.get('RANK_ID', '?')}"
folder = os.environ["PROBE_DIR"]
sock = None
if role == "MS_SCHED":
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((os.environ.get("MS_SCHED_HOST", "127.0.0.1"), int(os.environ["MS_SCHED_PORT"])))
    sock.listen(16)
digests = {}
for key in os.environ.get("PROBE_NAMES", "").split(","):
    value = os.environb.get(key.encode())
    digests[key] = None if value is None else hashlib.sha256(value).hexdigest()
line = {"name": name, "pid": os.getpid(), "sha256": digests, "argv": sys.argv[1:]}
print("envprobe " + json.dumps(line), flush=True)
tmp = os.path.join(folder, f".{name}.{os.getpid()}")
with open(tmp, "w") as fh:
    fh.write(str(os.getpid()))
os.rename(tmp, os.path.join(folder, f"{name}.ready"))
go = os.path.join(folder, "go")
deadline = time.monotonic() + 300
while not os.path.exists(go) and time.monotonic() < deadline:
    time.sleep(0.05)
sys.exit(0 if os.path.exists(go) else 1)
