"""Reading stack dumps and judging a hang's likely culprit: pure (no I/O).

A dump file (``stacks/rank<R>.pid<P>.txt`` in the attempt's folder) holds ``py-spy dump`` output::

    Thread 18283 (idle): "MainThread"
        clock_nanosleep (libc.so.6)              <- native frame (--native)
        block_here (train.py:3)                  <- Python frame, innermost first
        <module> (train.py:5)

or, where py-spy is missing or failed, the kernel's view from /proc (no frames).

The culprit of a hang is judged by evidence, in this order (:func:`judge_culprit`):

0. a rank whose process is stopped by a signal (state T, seen by the supervisor: it cannot run,
   so whatever the others wait for, it is this one; the longest stopped first);
1. a rank whose main thread is outside the collective (no MindSpore / communication frame)
   while other ranks' main threads are inside it;
2. a rank whose last step is behind the others';
3. the rank that went silent first (among the ranks that logged steps, when some did: a rank that
   logs no steps may well print nothing at all, its silence says nothing).

A rank that failed with a collective-timeout error (:func:`collective_timeout`) waited for the
others: it is not the culprit by itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

__all__ = ["Frame", "RankEvidence", "Culprit", "collective_timeout", "judge_culprit", "main_thread", "parse_pyspy"]

_THREAD_RE = re.compile(r'^Thread (\S+) \(([^)]*)\)(?::\s*"(.*)")?\s*$')
_FRAME_RE = re.compile(r"^\s{4}(\S.*?) \(([^()]*?)(?::(\d+))?\)\s*$")
#: A frame of MindSpore or of a communication library: the rank is inside a collective (or MindSpore's runtime).
_COMM_RE = re.compile(
    r"(?i)(^|[/\\])mindspore[/\\]|libmindspore|mindspore::|hccl|nccl|allreduce|all_reduce|allgather|"
    r"reducescatter|reduce_scatter|broadcast|barrier|collective|libmpi|gloo"
)

_PY_COMM_RE = re.compile(r"(?i)(^|[/\\])(mindspore|mindformers|torch[/\\]distributed|mpi4py|horovod)[/\\]")

#: Lines of a rank's log that say its collective gave up waiting for the others (MindSpore's CPU ring,
#: HCCL's HCCL_EXEC_TIMEOUT, NCCL's watchdog, MindSpore's dynamic-cluster receive timeout).
COLLECTIVE_TIMEOUT_RE = re.compile(
    r"Ring ?(?:ReduceScatter|AllGather|AllReduce)\w* wait (?:receiving|sending)|wait (?:receiving|sending) .* failed|"
    r"HCCL_EXEC_TIMEOUT|EI0002|hccl.*(?:timeout|time out)|"
    r"NCCL watchdog|Watchdog caught collective operation timeout|ProcessGroupNCCL.*[Tt]imeout|"
    r"(?:AllReduce|AllGather|ReduceScatter|Broadcast|Barrier)\w*.*(?:timed? ?out|timeout)",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Frame:
    """One frame: ``function (file:line)``; native frames have no line."""

    function: str
    file: str
    line: Optional[int] = None

    @property
    def native(self) -> bool:
        return self.line is None and not self.file.endswith(".py")

    def __str__(self) -> str:
        return (
            f"{self.function} ({self.file}:{self.line})" if self.line is not None else f"{self.function} ({self.file})"
        )

    @property
    def communication(self) -> bool:
        """A MindSpore or communication-library frame (Python frames by their file only: a user's
        function may well be called ``block_before_allreduce``)."""
        if self.native:
            return bool(_COMM_RE.search(self.file) or _COMM_RE.search(self.function))
        return bool(_PY_COMM_RE.search(self.file))


@dataclass(frozen=True)
class Thread:
    ident: str
    state: str
    name: str
    frames: Tuple[Frame, ...]


def parse_pyspy(text: str) -> List[Thread]:
    """The threads of one ``py-spy dump`` (frames innermost first); [] when it has none."""
    threads: List[Thread] = []
    head: Optional[Tuple[str, str, str]] = None
    frames: List[Frame] = []
    for line in text.splitlines():
        m = _THREAD_RE.match(line)
        if m:
            if head is not None:
                threads.append(Thread(head[0], head[1], head[2], tuple(frames)))
            head, frames = (m.group(1), m.group(2), m.group(3) or ""), []
            continue
        f = _FRAME_RE.match(line)
        if f and head is not None:
            frames.append(Frame(f.group(1), f.group(2), int(f.group(3)) if f.group(3) else None))
    if head is not None:
        threads.append(Thread(head[0], head[1], head[2], tuple(frames)))
    return threads


def main_thread(threads: Sequence[Thread]) -> Optional[Thread]:
    """The thread named ``MainThread``, else the first."""
    for t in threads:
        if t.name == "MainThread":
            return t
    return threads[0] if threads else None


def innermost_python(thread: Thread) -> Optional[Frame]:
    for f in thread.frames:
        if not f.native:
            return f
    return None


def in_collective(thread: Thread) -> bool:
    """Whether the thread's innermost frames are MindSpore's or a communication library's: the
    native frames above its innermost Python frame, and that Python frame."""
    for f in thread.frames:
        if f.communication:
            return True
        if not f.native:
            return False
    return False


@dataclass
class RankEvidence:
    """What is known of one rank when a hang is judged.

    Attributes:
        rank: the rank.
        last_step: its last step ``(epoch, step)`` (epoch None when the log names none), or None.
        silent_for: seconds since its last output line, or None when it printed nothing.
        frame: the innermost Python frame of its main thread (text), or None without a stack.
        in_collective: whether its main thread is inside MindSpore / a collective (None: no stack).
        timed_out: it failed with a collective-timeout error (it waited for the others).
        alive: it was running when the stacks were dumped.
        stopped_for: seconds its process had been stopped by a signal (state T), or None.
    """

    rank: int
    last_step: Optional[Tuple[Optional[int], int]] = None
    silent_for: Optional[float] = None
    frame: Optional[str] = None
    in_collective: Optional[bool] = None
    timed_out: bool = False
    alive: bool = True
    stack_files: List[str] = field(default_factory=list)
    stopped_for: Optional[float] = None


@dataclass(frozen=True)
class Culprit:
    rank: int
    evidence: str

    def to_json(self) -> Dict[str, object]:
        return {"rank": self.rank, "evidence": self.evidence}


def _step_key(step: Optional[Tuple[Optional[int], int]]) -> Optional[Tuple[int, int]]:
    if step is None:
        return None
    return (step[0] if step[0] is not None else -1, step[1])


def judge_culprit(ranks: Sequence[RankEvidence]) -> Optional[Culprit]:
    """The likely culprit of a hang by the evidence order of the module doc, or None."""
    stopped = [r for r in ranks if r.stopped_for is not None and r.alive]
    if stopped:  # it cannot run at all: whatever the others wait for, it is this rank
        pick = max(stopped, key=lambda r: (r.stopped_for, -r.rank))
        return Culprit(
            pick.rank,
            f"its process is stopped (state T: SIGSTOP or ^Z) for {pick.stopped_for:.0f} s; "
            "it cannot run until continued",
        )
    candidates = [r for r in ranks if not r.timed_out]
    if not candidates:
        return None
    inside = [r for r in ranks if r.in_collective or r.timed_out]  # a timed-out rank waited inside the collective
    outside = [r for r in candidates if r.in_collective is False]
    if inside and outside:
        pick = min(outside, key=lambda r: (_step_key(r.last_step) or (-1, -1), -(r.silent_for or 0.0), r.rank))
        others = ", ".join(f"{r.rank}" + (" (its collective timed out)" if r.timed_out else "") for r in inside)
        return Culprit(
            pick.rank,
            f"its main thread is outside the collective (in {pick.frame or 'unknown'}) while rank(s) {others} "
            "waited inside it",
        )
    stepped = [r for r in candidates if r.last_step is not None]
    keys = [k for k in (_step_key(r.last_step) for r in ranks) if k is not None]
    if stepped and len(set(keys)) > 1:
        low = min(stepped, key=lambda r: (_step_key(r.last_step) or (-1, -1), r.rank))
        high = max(keys)
        low_key = _step_key(low.last_step)
        if low_key is not None and low_key < high:
            return Culprit(low.rank, f"its last step is behind the others' ({_fmt(low.last_step)} < {_fmt(high)})")
    silent = [r for r in ranks if r.silent_for is not None]
    if any(r.last_step is not None for r in silent):  # scripts often log steps on rank 0 only: the others'
        silent = [r for r in silent if r.last_step is not None]  # silence is their normal state, no evidence
    if len(silent) > 1:
        first = max(silent, key=lambda r: (r.silent_for, -r.rank))
        gap = first.silent_for - max(r.silent_for for r in silent if r is not first)  # type: ignore[operator,type-var]  # silent holds only ranks whose silent_for is not None
        if first in candidates and gap >= 1.0:
            return Culprit(first.rank, f"it went silent first ({gap:.0f} s before the others)")
    return None


def _fmt(step: Optional[Tuple[Optional[int], int]]) -> str:
    if step is None:
        return "none"
    epoch, n = step
    return f"step {n}" if epoch is None or epoch < 0 else f"epoch {epoch} step {n}"


_ERRORISH_RE = re.compile(r"(?i)error|fail|exception|abort|caught|EI0002")


def collective_timeout(lines: Sequence[str]) -> Optional[str]:
    """The first line of a rank's log tail that says its collective timed out (an error line, not
    e.g. a warning that names a timeout setting), or None."""
    for line in lines:
        if COLLECTIVE_TIMEOUT_RE.search(line) and _ERRORISH_RE.search(line):
            return line.strip()[:300]
    return None
