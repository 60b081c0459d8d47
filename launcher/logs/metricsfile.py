"""``metrics.jsonl``: written from the ranks' logs as lines arrive, read incrementally.

:class:`MetricsWriter` follows every ``worker_<rank>.log`` of a job dir (and of its
``attempt_<k>/`` folders after restarts), parses each new line
(:func:`launcher.logs.metrics.parse_line`) and appends records
(:mod:`launcher.logs.progress` documents them) to ``<job dir>/metrics.jsonl``.  The logs are in
the job dir for every launcher (local, ssh, mpirun; attached or detached), so one writer in the
supervising process covers them all.  It only reads new bytes (a stat per file and poll).

:class:`JsonlTail` reads the records appended since its last call.
"""

from __future__ import annotations

import glob
import json
import os
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

from launcher.logs.follow import Follower, LogSource, job_log_sources
from launcher.logs.metrics import Metric, parse_line
from launcher.logs.progress import Progress, RankDeriver
from launcher.planning.job import layout
from launcher.planning.job.events import Event

if TYPE_CHECKING:
    from launcher.logs.goodput import Goodput

__all__ = [
    "EVENTS_FILE",
    "append_event",
    "read_events",
    "METRICS_FILE",
    "load_goodput",
    "MetricsWriter",
    "JsonlTail",
    "log_mtimes",
    "job_metric_sources",
    "LogMetrics",
]

METRICS_FILE = layout.METRICS_FILE
EVENTS_FILE = layout.EVENTS_FILE


def _attempt_dirs(job_dir: str) -> List[Tuple[int, str]]:
    out = [(0, job_dir)]
    for path in glob.glob(os.path.join(glob.escape(job_dir), layout.ATTEMPT_DIR_GLOB)):
        k = layout.parse_attempt_dir(os.path.basename(path))
        if k is not None and os.path.isdir(path):
            out.append((k, path))
    out.sort()
    return out


def job_metric_sources(job_dir: str) -> List[LogSource]:
    """Every rank log of every attempt of a job (attempt 0 first)."""
    out: List[LogSource] = []
    for _, folder in _attempt_dirs(job_dir):
        out.extend(job_log_sources(folder, scheduler=False))
    return out


def _attempt_of(job_dir: str, path: str) -> int:
    k = layout.parse_attempt_dir(os.path.basename(os.path.dirname(path)))
    return k if k is not None and os.path.dirname(os.path.dirname(path)) == job_dir.rstrip("/") else 0


def log_mtimes(job_dir: str) -> Dict[int, Optional[float]]:
    """rank -> mtime of its log in the newest attempt (the time of its last output)."""
    attempts = _attempt_dirs(job_dir)
    out: Dict[int, Optional[float]] = {}
    for src in job_log_sources(attempts[-1][1], scheduler=False):
        try:
            out[src.rank] = os.stat(src.path).st_mtime  # type: ignore[index]  # scheduler=False: each source is a rank's, its rank an int
        except OSError:
            continue
    return out


class LogMetrics:
    """Parses a job's rank logs into records, reading only new bytes at each :meth:`poll`.

    Args:
        job_dir: the job directory.
        clock: the wall clock (records' ``time``).
        on_line: called with ``(attempt, rank, metric or None)`` for every rank line as it is read
            (the hang watch's progress).
    """

    def __init__(
        self,
        job_dir: str,
        clock: Callable[[], float] = time.time,
        on_line: Optional[Callable[[int, int, Optional[Metric]], None]] = None,
    ) -> None:
        self.job_dir = os.path.abspath(job_dir)
        self._clock = clock
        self._on_line = on_line
        self._attempts: Dict[str, int] = {}
        self._derivers: Dict[str, RankDeriver] = {}
        self._batch: Dict[str, List[Any]] = {}
        self._ranks: Dict[str, Optional[int]] = {}
        self._follower = Follower(lambda: job_metric_sources(self.job_dir), self._collect, from_start=True)

    def _collect(self, src: LogSource, line: str) -> None:
        if src.rank is None:
            return
        metric = parse_line(line)
        if self._on_line is not None:
            attempt = self._attempts.get(src.path)
            if attempt is None:
                attempt = self._attempts[src.path] = _attempt_of(self.job_dir, src.path)
            self._on_line(attempt, src.rank, metric)
        if metric is not None:
            self._ranks[src.path] = src.rank
            self._batch.setdefault(src.path, []).append(metric)

    def poll(self, final: bool = False) -> List[Dict[str, Any]]:
        """Records for the lines that arrived since the last call (``final``: also partial last lines)."""
        if final:
            self._follower.flush()
        else:
            self._follower.poll()
        now = self._clock()
        records: List[Dict[str, Any]] = []
        for path, metrics in self._batch.items():
            deriver = self._derivers.get(path)
            if deriver is None:
                rank = self._ranks.get(path)  # the job's own record of whose log this is
                deriver = self._derivers[path] = RankDeriver(
                    rank if rank is not None else -1, _attempt_of(self.job_dir, path)
                )
            records.extend(deriver.feed(metrics, now))
        self._batch.clear()
        return records


class MetricsWriter:
    """Appends a job's metrics to ``<job dir>/metrics.jsonl`` while it runs (a thread).

    Args:
        job_dir: the job directory.
        interval: seconds between polls of the logs.
        on_line: see :class:`LogMetrics`.
        on_records: called with the records of each poll (after they are written).
    """

    def __init__(
        self,
        job_dir: str,
        interval: float = 0.5,
        on_line: Optional[Callable[[int, int, Optional[Metric]], None]] = None,
        on_records: Optional[Callable[[List[Dict[str, Any]]], None]] = None,
    ) -> None:
        self.job_dir = job_dir
        self.path = os.path.join(job_dir, METRICS_FILE)
        self._interval = interval
        self._source = LogMetrics(job_dir, on_line=on_line)
        self._on_records = on_records
        self._lock = threading.Lock()  # the supervisor may poll too (before it judges an attempt)
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.records = 0

    def poll(self, final: bool = False) -> int:
        """Parse what is new and append it; returns the number of records written."""
        with self._lock:
            return self._poll(final)

    def _poll(self, final: bool) -> int:
        records = self._source.poll(final=final)
        if records and self._on_records is not None:
            self._on_records(records)
        if not records:
            return 0
        data = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records)
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, data.encode("utf-8"))
            finally:
                os.close(fd)
        except OSError:
            return 0  # metrics are best effort: never fail the job for them
        self.records += len(records)
        return len(records)

    def start(self) -> "MetricsWriter":
        self._thread = threading.Thread(target=self._run, name="metrics", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.poll()
            except Exception:  # a bug here must not take the supervisor down
                pass

    def stop(self) -> None:
        """Stop polling and write what is left (the ranks have exited)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            self.poll(final=True)
        except Exception:
            pass


class JsonlTail:
    """Reads the complete lines appended to a JSON-lines file since the last :meth:`read`."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._offset = 0
        self._partial = b""

    def read(self) -> List[Dict[str, Any]]:
        try:
            size = os.path.getsize(self.path)
        except OSError:
            return []
        if size < self._offset:
            self._offset, self._partial = 0, b""
        if size == self._offset:
            return []
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self._offset)
                data = fh.read(size - self._offset)
        except OSError:
            return []
        self._offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        out: List[Dict[str, Any]] = []
        for raw in lines:
            try:
                obj = json.loads(raw)
            except ValueError:
                continue
            if isinstance(obj, dict):
                out.append(obj)
        return out


def read_records(path: str) -> List[Dict[str, Any]]:
    """Every record of a ``metrics.jsonl`` (empty when missing)."""
    return JsonlTail(path).read()


def load_progress(job_dir: str) -> Progress:
    """The progress of a job from its ``metrics.jsonl``, else from its logs."""
    prog = Progress()
    path = os.path.join(job_dir, METRICS_FILE)
    if os.path.exists(path):
        prog.extend(read_records(path))
    else:
        prog.extend(LogMetrics(job_dir).poll(final=True))
    return prog


def _jsonable(obj: Any) -> Any:
    to_json = getattr(obj, "to_json", None)
    return to_json() if callable(to_json) else str(obj)


def append_event(job_dir: str, event: Event, when: Optional[float] = None) -> None:
    """Append one event of the job (:mod:`launcher.planning.job.events`) to ``<job dir>/events.jsonl``
    (best effort; never raises).

    A line is ``{...event.to_json(), "time": <wall clock s>, "kind": KIND}``; kinds are the
    supervisor's (``started``, ``failure``, ``teardown``, ``restart``, ``timeout``, ``interrupted``)
    plus ``preflight``, ``job_start`` and ``job_end`` written around the run.  The report draws its
    timeline from it.
    """
    rec = dict(event.to_json())
    rec.update(time=round(time.time() if when is None else when, 3), kind=event.kind)
    try:
        line = json.dumps(rec, default=_jsonable, separators=(",", ":")) + "\n"
        fd = os.open(os.path.join(job_dir, EVENTS_FILE), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode("utf-8"))
        finally:
            os.close(fd)
    except (OSError, TypeError, ValueError):
        pass


def read_events(job_dir: str) -> List[Dict[str, Any]]:
    """The events of a job (empty when it has none)."""
    return read_records(os.path.join(job_dir, EVENTS_FILE))


def load_goodput(job_dir: str, summary: Optional[Dict[str, Any]] = None, now: Optional[float] = None) -> Goodput:
    """The job's goodput: its ``summary.json``'s (written when it ended), else counted from its
    ``events.jsonl`` and ``metrics.jsonl`` (:func:`launcher.logs.goodput.account`; a running job's up to ``now``)."""
    from launcher.logs.goodput import Goodput, account

    done = Goodput.from_json((summary or {}).get("goodput"))
    if done is not None:
        return done
    ended = (summary or {}).get("ended")  # a job from before job_end events ended then
    if now is None and isinstance(ended, (int, float)):
        now = float(ended)
    return account(read_events(job_dir), read_records(os.path.join(job_dir, METRICS_FILE)), now=now)
