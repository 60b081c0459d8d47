"""The thread decisions made on the hosts themselves, said on the console.

Under mpirun and Slurm, a host's usable cores are only learned on the host, when its first rank
starts: the rank wrapper (``templates/mslaunch-rank.sh``) or the task shim
(:mod:`launcher.execution.slurm.shim`) decides the threads per rank there and writes
``<attempt dir>/host-threads/<host>.json`` (the job dir is on a filesystem every host sees, which
these launchers need anyway).  :class:`HostThreadsWatch` follows that folder during the attempt
and says each host's decision once, as the ssh backend says the ones its agents report
(``cpu: <host>: threads per rank ...``, and ``warning: ...`` when the host's ranks outnumber its
cores); when the attempt ends it merges the records into ``<attempt dir>/host-threads.json``, the
file the ssh backend writes.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Optional

__all__ = ["FOLDER", "HostThreadsWatch", "NoteSettings", "WatchesHostThreads", "watch_host_threads"]

#: The per-host records' folder in the attempt dir.
FOLDER = "host-threads"


@dataclass(frozen=True)
class NoteSettings:
    """A backend's settings from the CLI that only carry the console.

    Attributes:
        on_note: called with one line for the console (``cpu: ...`` / ``warning: ...``).
    """

    on_note: Optional[Callable[[str], None]] = field(default=None, compare=False)


class HostThreadsWatch:
    """Follows ``<attempt_dir>/host-threads/`` (see the module doc).

    Args:
        attempt_dir: the attempt's folder.
        on_note: where each host's lines go (None: only the merged file is written).
        interval: seconds between two looks at the folder.
    """

    def __init__(self, attempt_dir: str, on_note: Optional[Callable[[str], None]], interval: float = 0.25) -> None:
        self.folder = os.path.join(attempt_dir, FOLDER)
        self.merged_path = os.path.join(attempt_dir, "host-threads.json")
        self.on_note = on_note
        self.interval = interval
        self.records: Dict[str, Dict[str, Any]] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None

    def start(self) -> "HostThreadsWatch":
        self._thread = threading.Thread(target=self._run, name="mslaunch-host-threads", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.poll()
            except Exception:  # noqa: BLE001 - what the hosts decided is said best effort: never a traceback on the console
                pass

    def poll(self) -> None:
        """Read the records not read yet (a half-written one is read at the next look)."""
        try:
            names = sorted(os.listdir(self.folder))
        except OSError:
            return
        with self._lock:
            for name in names:
                host = name[: -len(".json")] if name.endswith(".json") else ""
                if not host or host in self.records:
                    continue
                try:
                    with open(os.path.join(self.folder, name), encoding="utf-8") as f:
                        record = json.load(f)
                except (OSError, ValueError):
                    continue
                if not isinstance(record, dict):
                    continue
                self.records[host] = record
                self._say(record)

    def _say(self, record: Dict[str, Any]) -> None:
        if self.on_note is None:
            return
        for kind, key in (("cpu", "notes"), ("warning", "warnings")):
            for line in record.get(key) or ():
                self.on_note(f"{kind}: {line}")

    def close(self) -> None:
        """Stop following; read what came last; write the merged file (when any host wrote one)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.poll()
        if not self.records:
            return
        from launcher.jobs.files import write_atomic

        try:
            write_atomic(self.merged_path, json.dumps(self.records, indent=1, sort_keys=True) + "\n")
        except OSError:
            pass  # the per-host records stay; the job's result does not depend on this file


def watch_host_threads(ctx: Any, backend: str, attempt_dir: str) -> Optional[HostThreadsWatch]:
    """A started watch for a backend's attempt when its plan leaves threads to the hosts
    (``plan.host_threads``), with the console of the backend's :class:`NoteSettings`; else None.
    ``ctx`` is the attempt's :class:`~launcher.execution.backend.BackendContext`."""
    if not ctx.plan.host_threads:
        return None
    settings = ctx.settings_for(backend) or NoteSettings()
    return HostThreadsWatch(attempt_dir, getattr(settings, "on_note", None)).start()


class WatchesHostThreads:
    """For a backend whose hosts decide their threads themselves (mpirun, Slurm): its ``create``
    sets :attr:`threads_watch` (:func:`watch_host_threads`); its ``close`` stops the watch."""

    threads_watch: Optional[HostThreadsWatch] = None  # the hosts' thread decisions, said on the console

    def close(self) -> None:
        """Say the hosts' thread decisions that came last and merge them (see the module doc)."""
        if self.threads_watch is not None:
            self.threads_watch.close()
