"""Two jobs measured on the same minutes of a shared machine: each on one core of two, swapping.

A goodput ratio divides a fault-free job's wall time by a faulty one's.  Run one after the other
they see different machines: the same step took 2.3 s in one stretch and 3.9 s in another here.
Run at the same time, each pinned to its own core, they see the same minutes, but two vCPUs need
not be alike: a pure-Python loop ran 18 % faster on one than on the other here, and the other way
round minutes later.  So the two jobs swap cores every few seconds (:class:`Alternate`), every
thread of every process of each, and each spends as long on each core.

Used by ``bench/bench_goodput.py --side-by-side``; stdlib and psutil only.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from typing import Any, Callable, Iterable, List, Optional

__all__ = ["Alternate", "busy", "core_speeds", "pin_cluster", "tree"]

PY = sys.executable


def pin_cluster(c: Any, core: int) -> None:
    """Every host's sshd of the namespace cluster ``c`` on ``core`` alone: what it starts (agents,
    zygotes, ranks) inherits it."""
    for h in c.hosts:
        pid = c.sshd_pid(h.name)
        if pid is not None:
            os.sched_setaffinity(pid, {core})


#: A pure-Python loop on one core for a fixed wall time; prints its iterations per second.
_SPIN = (
    "import os, sys, time\n"
    "os.sched_setaffinity(0, {int(sys.argv[1])})\n"
    "n, end = 0, time.monotonic() + float(sys.argv[2])\n"
    "while time.monotonic() < end:\n    n += 1\n"
    "print(n / float(sys.argv[2]))\n"
)


def core_speeds(cores: List[int], seconds: float = 3.0) -> List[float]:
    """Each core's rate at the same time (the same loop pinned to each): whether the cores of a
    side-by-side run are alike."""
    procs = [
        subprocess.Popen([PY, "-c", _SPIN, str(k), str(seconds)], stdout=subprocess.PIPE, text=True) for k in cores
    ]
    return [float(p.communicate()[0]) for p in procs]


def busy(core: int) -> "subprocess.Popen[bytes]":
    """A loop on ``core`` until killed: keeps a core as loaded as the job that ended there kept it
    (two vCPUs can be one physical core's two threads: one runs faster beside an idle other)."""
    return subprocess.Popen([PY, "-c", "import os\nos.sched_setaffinity(0, {%d})\nwhile True: pass" % core])


class Alternate:
    """Swaps two groups of processes between two cores every ``every`` s (every thread of each,
    each round), so that each job spends as long on each core: two vCPUs of one machine can run
    at different speeds for minutes (a loop ran 18 % faster on one than on the other here)."""

    def __init__(self, groups: List[Callable[[], Iterable[int]]], cores: List[int], every: float = 10.0) -> None:
        self.groups, self.cores, self.every = groups, cores, every
        self.rounds = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="alternate", daemon=True)

    def __enter__(self) -> "Alternate":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def place(self) -> None:
        """Each group on its core of this round (a process started since inherits its parent's)."""
        for i, pids in enumerate(self.groups):
            core = {self.cores[(i + self.rounds) % len(self.cores)]}
            for pid in list(pids()):
                try:
                    tids = os.listdir(f"/proc/{pid}/task")
                except OSError:
                    continue
                for tid in tids:
                    try:
                        os.sched_setaffinity(int(tid), core)
                    except OSError:
                        pass

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.rounds += 1
            self.place()


def tree(pid: Optional[int]) -> List[int]:
    """``pid`` and every process below it (none once it is gone)."""
    import psutil

    try:
        top = psutil.Process(pid) if pid is not None else None
        return [top.pid, *(p.pid for p in top.children(recursive=True))] if top is not None else []
    except psutil.Error:
        return []
