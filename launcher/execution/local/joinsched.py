"""A rank joins MindSpore's dynamic cluster under ``SCHED_BATCH``; mslaunch gives it back the
normal policy once it has joined.

Why: MindSpore 2.10's TCP client (``TCPComm::Connect``, used by every worker to register with the
scheduler) adds the new socket to its event loop *before* it marks the connection
``kConnecting``.  On loopback the connect completes at once, so the event-loop thread may run
first and mark it ``kConnected``, and the main thread then overwrites that with
``kConnecting``: the connection never counts as made, ``Register`` fails after ~30 ms
("Failed to connect to the meta server node url") and retries 0.5 s later.  The event-loop
thread wins that race when its wake-up preempts the main thread, i.e. when the other cores are
busy: on 2 loaded cores a worker failed 3-31 times in a row, ``init()`` took 4-20 s instead of
~1.5 s.  A ``SCHED_BATCH`` thread does not preempt on wake-up (its preemption waits for the
tick), so the main thread finishes its two stores first: 0 failures in the same conditions.

So the zygote forks a dynamic cluster's worker with ``SCHED_BATCH`` (only when it would have
had ``SCHED_OTHER``, the default) and :class:`JoinWatch` puts every thread of it back to
``SCHED_OTHER`` as soon as its log shows that ``init()`` finished (MindSpore's line creating
the world group), when it ends, or after ``limit`` seconds, whichever comes first.  The
program runs its training under the policy it would have had; only its start-up (the imports
and ``init()``) runs as a batch task, which changes nothing but how soon its threads preempt
others on a wake-up.  Stdlib only; Linux.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Dict, List, Optional, Tuple

from launcher.execution.process.proctree import JOINED, restore_normal

__all__ = ["JOINED_MARKERS", "JoinWatch"]

#: Lines a MindSpore worker logs (at its default ``GLOG_v``) at the end of ``init()``.
JOINED_MARKERS = (JOINED, b"Cluster is successfully initialized")
#: The last marker is printed before the collective library connects the workers to each other;
#: the first one after.  The watch waits for the first one, else for ``limit``.
_DONE = JOINED_MARKERS[0]


class JoinWatch:
    """Follows the logs of ranks started under ``SCHED_BATCH``; restores each one's policy once
    it has joined the cluster (see the module doc).  One thread while something is watched."""

    def __init__(self, limit: float = 120.0, poll: float = 0.05) -> None:
        self.limit = limit
        self.poll = poll
        self._lock = threading.Lock()
        self._watched: Dict[int, Tuple[str, float, int]] = {}  # pid -> (log, since, offset read)
        self._tail: Dict[int, bytes] = {}
        self._thread: Optional[threading.Thread] = None
        self._stop = threading.Event()
        self.restored: List[Tuple[int, str]] = []  # (pid, why) in order

    def watch(self, pid: int, log_path: str) -> None:
        try:
            offset = os.path.getsize(log_path)
        except OSError:
            offset = 0
        with self._lock:
            self._watched[pid] = (log_path, time.monotonic(), offset)
            if self._thread is None or not self._thread.is_alive():
                self._stop.clear()
                self._thread = threading.Thread(target=self._run, name="join-sched", daemon=True)
                self._thread.start()

    def seen(self, pid: int) -> Optional[int]:
        """Bytes of ``pid``'s log read since it was watched (None: not watched any more)."""
        with self._lock:
            item = self._watched.get(pid)
        return None if item is None else item[2]

    def _run(self) -> None:
        while not self._stop.wait(self.poll):
            with self._lock:
                items = list(self._watched.items())
            if not items:
                with self._lock:
                    if not self._watched:
                        self._thread = None
                        return
                continue
            for pid, (log, since, offset) in items:
                why = self._check(pid, log, since, offset)
                if why is not None:
                    restore_normal(pid)
                    with self._lock:
                        self._watched.pop(pid, None)
                        self._tail.pop(pid, None)
                    self.restored.append((pid, why))

    def _check(self, pid: int, log: str, since: float, offset: int) -> Optional[str]:
        if not os.path.exists(f"/proc/{pid}"):
            return "ended"
        try:
            with open(log, "rb") as f:
                f.seek(offset)
                chunk = f.read()
        except OSError:
            chunk = b""
        if chunk:
            text = self._tail.get(pid, b"") + chunk
            if _DONE in text:
                return "joined"
            self._tail[pid] = text[-len(_DONE) :]
            with self._lock:
                if pid in self._watched:
                    self._watched[pid] = (log, since, offset + len(chunk))
        if time.monotonic() - since > self.limit:
            return "time limit"
        return None

    def close(self) -> None:
        """Restore what is still watched and stop the thread."""
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout=5)
        with self._lock:
            left, self._watched = list(self._watched), {}
        for pid in left:
            restore_normal(pid)
            self.restored.append((pid, "closed"))
