"""A host's Python for the health probe that cuts the host's own link when the compute step begins.

    cut_on_compute.py STAMP ARGS...     run ``python ARGS...`` (the probe) with its stdin passed on;
                                        on the first ``{"op": "compute"}`` line: ``ip rule add
                                        priority 1 blackhole`` (in the host's network namespace:
                                        every packet it sends is dropped), the time written to
                                        STAMP, then the line passed on

A silent cut, as a link lost somewhere on the way: the host still takes packets in and answers ARP,
but nothing it sends leaves (no error reaches the other side; ``ip rule del priority 1`` undoes it).
The probe's answers go straight to the session (its stdout is this process's): after the cut none
arrives.  Exits with the probe's exit code (the probe ends by its own lifetime at the latest).
"""

import json
import subprocess
import sys
import threading
import time

stamp = sys.argv[1]
probe = subprocess.Popen([sys.executable] + sys.argv[2:], stdin=subprocess.PIPE)


def pass_on() -> None:
    cut = False
    for line in sys.stdin.buffer:
        try:
            op = json.loads(line).get("op")
        except ValueError:
            op = None
        if op == "compute" and not cut:
            subprocess.run(["ip", "rule", "add", "priority", "1", "blackhole"], check=True)
            with open(stamp, "w") as fh:
                fh.write(repr(time.time()))
            cut = True
        try:
            probe.stdin.write(line)
            probe.stdin.flush()
        except OSError:
            return
    probe.stdin.close()


threading.Thread(target=pass_on, daemon=True).start()
sys.exit(probe.wait())
