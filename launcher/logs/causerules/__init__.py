"""How each failure cause is recognised, and the evidence it gives (pure): the matchers that
:data:`launcher.logs.causes.RULES` lists, with the input they read (:class:`Failure`).

A matcher takes the :class:`Facts` of one failure and returns a :class:`Found` (the evidence: the
line or record it matched, the fields its hint names, and for causes a restart cannot fix the key
that tells two failures apart) or None.  Which matcher wins is the order of the table, not here.

This module has what every matcher reads and gives, and the helpers they share; the matchers are
in its modules, by what they read:

* :mod:`~launcher.logs.causerules.judged`: judged elsewhere (a lost host, the hang watch's report);
* :mod:`~launcher.logs.causerules.oom`: the host's records (out of memory);
* :mod:`~launcher.logs.causerules.errorlines`: the log's errors that name their cause (a port
  taken, a device or runtime error, a collective timeout, a full disk) and native crashes;
* :mod:`~launcher.logs.causerules.exceptions`: the ending exception (a missing module or file, any
  other Python exception) and ``unknown``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Iterable, List, Mapping, Optional, Sequence, Tuple

from launcher.logs.hostmem import HostRecords
from launcher.logs.tracebacks import PyException, exception_chain, strip_ansi

__all__ = [
    "EVIDENCE_MAX",
    "Facts",
    "Failure",
    "Found",
    "TAIL_LINES",
    "at_user_frame",
    "cut",
    "exception_lines",
    "first_match",
    "last_line",
    "message",
    "on_host",
    "signal_of",
]

#: Lines of a failed process's log the classifier reads (a MindSpore traceback with its sections
#: runs to 60+ lines, and the error line that names the cause comes before it).
TAIL_LINES = 400
#: Evidence longer than this is cut (with ``...``).
EVIDENCE_MAX = 300


@dataclass(frozen=True)
class Failure:
    """What the supervisor knows of the first failure of an attempt (the classifier's input).

    Attributes:
        name: ``rank 3`` or ``scheduler``.
        host: where it ran.
        returncode: subprocess convention (negative: killed by that signal; a shell's 128+N is read
            as signal N too); None when unknown (a lost connection).
        tail: the last lines of its log (up to :data:`TAIL_LINES` are read).
        log: its log's path (named by the hint of an unknown cause).
        scheduler_tail: the last lines of the scheduler's log, when the job has one.
        scheduler_host: the scheduler's host.
        records: the host's kernel and cgroup records about the process (:class:`HostRecords`).
        pids: the process's pid and its descendants' (matched against the kernel's OOM lines).
        peak_rss: its peak resident memory in bytes, when known.
        hang: the attempt's ``hang`` object of summary.json (:mod:`launcher.execution.supervision.hangwatch`), or None.
        lost: why its host counts as lost (``connection to h3 lost (closed)``), or None.
    """

    name: str = "rank"
    host: str = ""
    returncode: Optional[int] = None
    tail: Tuple[str, ...] = ()
    log: str = ""
    scheduler_tail: Tuple[str, ...] = ()
    scheduler_host: Optional[str] = None
    records: HostRecords = field(default_factory=HostRecords)
    pids: Tuple[int, ...] = ()
    peak_rss: Optional[int] = None
    hang: Optional[Mapping[str, Any]] = None
    lost: Optional[str] = None


def signal_of(returncode: Optional[int]) -> Optional[int]:
    """The signal that ended a process: ``-N`` (subprocess) or ``128+N`` (a shell's exit status)."""
    if returncode is None:
        return None
    if returncode < 0:
        return -returncode
    if 128 < returncode <= 128 + 64:
        return returncode - 128
    return None


@dataclass(frozen=True)
class Facts:
    """One failure read once: its log's lines (colour codes stripped), the signal that ended it and
    the chain of the Python exception that ended it (empty when a signal did, or no traceback)."""

    failure: Failure
    lines: Tuple[str, ...]
    signal: Optional[int]
    chain: Tuple[PyException, ...]

    @classmethod
    def of(cls, failure: Failure) -> "Facts":
        lines = tuple(strip_ansi(x) for x in failure.tail[-TAIL_LINES:])
        sig = signal_of(failure.returncode)
        chain = () if sig is not None else tuple(exception_chain(lines))
        return cls(failure, lines, sig, chain)

    @property
    def exception(self) -> Optional[PyException]:
        """The exception that ended the process, or None."""
        return self.chain[-1] if self.chain else None

    @property
    def host(self) -> str:
        return self.failure.host or "its host"


@dataclass(frozen=True)
class Found:
    """What a matcher found: the evidence, the fields its rule's hint names, the key of a cause a
    restart cannot fix (None for others), and a hint of its own when the rule's does not fit."""

    evidence: str
    fields: Mapping[str, str] = field(default_factory=dict)
    key: Optional[Tuple[str, ...]] = None
    hint: Optional[str] = None


# : MindSpore's log record prefix: ``[ERROR] DISTRIBUTED(41187,7f6a...,python):2026-11-26-07:40:11.512.003 [file.cc:281]
# Listen] ``.
_MS_PREFIX_RE = re.compile(
    r"^\s*\[(?:DEBUG|INFO|WARNING|ERROR|CRITICAL|EXCEPTION|TRACE)\] [\w_]+\([^)]*\):\S+ (?:\[[^\]]*\] ?\w*\] ?)?"
)


def message(line: str) -> str:
    """A log line without MindSpore's record prefix (level, module, pid, time, source), stripped."""
    return _MS_PREFIX_RE.sub("", line).strip()


def cut(text: str, n: int = EVIDENCE_MAX) -> str:
    """``text`` on one line, at most ``n`` characters (``...`` marks a cut)."""
    one = " ".join(text.split())
    return one if len(one) <= n else one[: n - 3].rstrip() + "..."


def on_host(facts: Facts, host: Optional[str] = None) -> str:
    h = host if host is not None else facts.failure.host
    return f" (on {h})" if h else ""


def at_user_frame(exc: PyException) -> str:
    frame = exc.user_frame()
    return f" at {frame}" if frame is not None else ""


def first_match(patterns: Sequence["re.Pattern[str]"], lines: Iterable[str]) -> Optional[Tuple[str, "re.Match[str]"]]:
    for line in lines:
        for p in patterns:
            m = p.search(line)
            if m:
                return line, m
    return None


def exception_lines(facts: Facts) -> List[str]:
    """The lines of the ending exception chain, last exception first (message, then details)."""
    out: List[str] = []
    for exc in reversed(facts.chain):
        out.append(exc.line)
        out.extend(exc.details)
    return out


def last_line(lines: Sequence[str]) -> str:
    """The last non-empty line, stripped (``(empty log)`` when none)."""
    return next((x.strip() for x in reversed(lines) if x.strip()), "(empty log)")
