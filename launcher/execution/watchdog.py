"""The job watchdog: kills a job's process groups if mslaunch dies without tearing them down.

mslaunch starts it first (``python -m launcher.execution.watchdog``) in its own session, with a
pipe on its stdin, and writes one line per started process group: ``<pgid>``, and ``-<pgid>``
once that group is gone (so a recycled id is never signalled).  On a line
``exit`` it ends quietly (mslaunch finished its own teardown).  On end-of-file without ``exit``
(mslaunch was killed, even with SIGKILL) it sends SIGTERM to every group it was told of, waits
up to ``grace`` seconds, then SIGKILLs what is left.
"""
from __future__ import annotations

import os
import signal
import sys
import time
from typing import List


def _alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _signal_all(pgids: List[int], sig: int) -> None:
    for pgid in pgids:
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def main(argv: List[str]) -> int:
    grace = float(argv[0]) if argv else 1.0
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal ^C is for mslaunch, not for us
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    pgids: List[int] = []
    for line in sys.stdin:
        line = line.strip()
        if line == "exit":
            return 0
        if line.isdigit():
            pgids.append(int(line))
        elif line.startswith("-") and line[1:].isdigit() and int(line[1:]) in pgids:
            pgids.remove(int(line[1:]))
    live = [p for p in pgids if _alive(p)]
    if not live:
        return 0
    _signal_all(live, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_alive(p) for p in live):
        time.sleep(0.05)
    _signal_all([p for p in live if _alive(p)], signal.SIGKILL)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
