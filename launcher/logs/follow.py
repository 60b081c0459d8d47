"""Following per-rank log files: merged, prefixed, new lines and new files as they appear.

Used by ``mslaunch run``'s console (tee) and by ``mslaunch logs tail``.  Files are polled in
one sweep (a stat per file, a read of the files that grew), which works the same for files
that remote ranks stream into and on every file system.  A job of 1,000+ ranks stays cheap to
follow: the file set is listed again at most every ``rescan`` seconds (not at every sweep), and
sweeps that find nothing back off from ``interval`` to :data:`MAX_INTERVAL` seconds, starting
over at ``interval`` as soon as lines arrive (``bench/bench_logs_follow.py`` measures it).
"""

from __future__ import annotations

import os
import re
import stat
import threading
import time
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from launcher.logs.joblogs import job_logs

#: Lines the default console mode shows from every rank (not only rank 0).
ERROR_RE = re.compile(
    r"(Traceback \(most recent call last\)|\b\w*(Error|Exception)\b|\bERROR\b|\bFATAL\b|\bfailed\b|^\s+File \")"
)

#: Most bytes a follower reads from one file per poll (bounds memory when a rank writes a lot).
MAX_READ = 8 * 1024 * 1024

#: Longest wait between two sweeps that found nothing new (see :meth:`Follower.next_wait`).
MAX_INTERVAL = 1.0

#: Most bytes :func:`last_lines` reads from the end of a file.
MAX_TAIL = 16 * 1024 * 1024

# ANSI colours for rank prefixes on a TTY.
_COLOURS = ("36", "32", "33", "35", "34", "91", "92", "93", "94", "95", "96")


@dataclass(frozen=True)
class LogSource:
    """One log file and its console label (``rank 3``, ``scheduler``)."""

    label: str
    path: str
    rank: Optional[int]


def job_log_sources(folder: str, ranks: Optional[Sequence[int]] = None, scheduler: bool = True) -> List[LogSource]:
    """The log files in a job (or attempt) folder that exist, ranks ascending, scheduler last:
    the names the job recorded in its plan.json (see :mod:`launcher.logs.joblogs`)."""
    present, _ = job_logs(folder, ranks, scheduler)
    return [LogSource(log.label, log.path, log.rank) for log in present]


def prefix(source: LogSource, colour: bool) -> str:
    text = f"[{source.label}]"
    if not colour:
        return text + " "
    code = "2" if source.rank is None else _COLOURS[source.rank % len(_COLOURS)]
    return f"\x1b[{code}m{text}\x1b[0m "


class Follower:
    """Reads new complete lines from a changing set of files.

    Args:
        sources: called at each poll; returns the files to follow now (new ones are picked up).
        emit: called with ``(source, line)`` for each new line (without its newline).
        from_start: read files from their start (else from their current end).
        interval: seconds between polls in :meth:`run` while lines arrive (idle sweeps back off
            to :data:`MAX_INTERVAL`).
        rescan: seconds between two calls of ``sources`` (the first poll and :meth:`flush`
            always call it): new files are picked up within about that time.
        clock: the monotonic clock (tests pass their own).
    """

    def __init__(
        self,
        sources: Callable[[], Iterable[LogSource]],
        emit: Callable[[LogSource, str], None],
        from_start: bool = True,
        interval: float = 0.2,
        rescan: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sources = sources
        self._emit = emit
        self._from_start = from_start
        self._interval = interval
        self._rescan = rescan
        self._clock = clock
        self._listed: List[LogSource] = []
        self._listed_at: Optional[float] = None
        self._wait = interval
        self._offsets: Dict[str, int] = {}
        self._partial: Dict[str, bytes] = {}
        self._known: Dict[str, LogSource] = {}
        self._inodes: Dict[str, Tuple[int, int]] = {}  # a new file under a known name (rotation) starts over

    def seek(self, offsets: Dict[str, int]) -> None:
        """Continue these files from the given byte offsets (e.g. after showing their tails)."""
        self._offsets.update(offsets)

    def next_wait(self, emitted: int) -> float:
        """Seconds to wait before the next sweep, given the lines the last one emitted: the base
        interval while lines arrive, doubling up to :data:`MAX_INTERVAL` while none do."""
        self._wait = self._interval if emitted else min(self._wait * 2, max(MAX_INTERVAL, self._interval))
        return self._wait

    def poll(self, rescan: bool = False) -> int:
        """Read what is new in every file; returns the number of lines emitted.

        Args:
            rescan: list the files again now (else only every ``rescan`` seconds).
        """
        now = self._clock()
        if rescan or self._listed_at is None or now - self._listed_at >= self._rescan:
            self._listed = list(self._sources())
            self._listed_at = now
        count = 0
        for src in self._listed:
            if src.path not in self._known:
                self._known[src.path] = src
                if not self._from_start:
                    try:
                        self._offsets[src.path] = os.path.getsize(src.path)
                    except OSError:
                        self._offsets[src.path] = 0
            count += self._read(src)
        return count

    def _read(self, src: LogSource) -> int:
        offset = self._offsets.get(src.path, 0)
        try:
            st = os.stat(src.path)
        except OSError:
            return 0
        size, inode = st.st_size, (st.st_dev, st.st_ino)
        if size < offset or self._inodes.setdefault(src.path, inode) != inode:  # truncated or replaced: start over
            offset = 0
            self._inodes[src.path] = inode
            self._partial.pop(src.path, None)
        if size == offset:
            return 0
        try:
            with open(src.path, "rb") as fh:
                fh.seek(offset)
                data = fh.read(min(size - offset, MAX_READ))  # the rest at the next poll
        except OSError:
            return 0
        self._offsets[src.path] = offset + len(data)
        data = self._partial.pop(src.path, b"") + data
        lines = data.split(b"\n")
        if lines[-1]:
            self._partial[src.path] = lines[-1]
        for raw in lines[:-1]:
            self._emit(src, raw.decode("utf-8", "replace").rstrip("\r"))
        return len(lines) - 1

    def flush(self) -> None:
        """Read what is left (listing the files again), then emit partial last lines (files that
        do not end with a newline)."""
        self.poll(rescan=True)
        for path, rest in list(self._partial.items()):
            if rest:
                self._emit(self._known[path], rest.decode("utf-8", "replace"))
        self._partial.clear()

    def run(self, stop: threading.Event) -> None:
        """Poll until ``stop`` is set (backing off while nothing is new), then read what is left once more."""
        wait = self._interval
        while not stop.wait(wait):
            wait = self.next_wait(self.poll())
        self.flush()


def last_lines(path: str, n: int, block: int = 64 * 1024) -> Tuple[List[str], int]:
    """The last ``n`` complete lines of a log file and the byte offset after them.

    Reads backwards from the end only as far as ``n`` lines need (at most :data:`MAX_TAIL`
    bytes), so a huge log costs little; a line that starts before those bytes is not shown.
    Anything that is not a regular file (a FIFO, a device, a directory) gives no lines and is
    never read, so this cannot block.

    Returns:
        ``(lines, offset)``: the lines without newlines; the offset of the end of the last
        complete line (a partial last line is left for a follower).  ``([], 0)`` if unreadable.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return [], 0
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return [], 0
        size = st.st_size
        pos = size
        chunks: List[bytes] = []  # newest first: each read is copied and counted once
        newlines = 0
        while pos > 0 and newlines <= n and size - pos < MAX_TAIL:
            step = min(block, pos)
            pos -= step
            chunk = os.pread(fd, step, pos)
            chunks.append(chunk)
            newlines += chunk.count(b"\n")
    except OSError:
        return [], 0
    finally:
        os.close(fd)
    data = b"".join(reversed(chunks))
    lines = data.split(b"\n")
    partial = lines.pop() if lines else b""
    if pos > 0 and lines:
        lines.pop(0)  # the end of a line that starts before what was read: not shown
    text = [line.decode("utf-8", "replace") for line in lines]
    return (text[-n:] if n > 0 else []), size - len(partial)
