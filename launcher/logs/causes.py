"""The cause of a failure: its kind, the evidence (the line or record that shows it) and one hint
(pure; docs/failures.md is the user's table of causes).

:func:`classify` reads what the supervisor has about an attempt's first failure (:class:`Failure`:
exit status, log tails, the host's kernel and cgroup records, the hang report, a lost host) and
goes down :data:`RULES` in order: the first rule that matches gives the :class:`Cause`; none
matching gives ``unknown`` with the log's last line.  The order is the precedence, and its reasons:

1. ``lost_host``, ``collective_timeout`` and ``hang`` were judged by the supervisor already (a lost
   host's log just stops; a hung rank was torn down);
2. ``oom``: a SIGKILL the host's records attribute to its OOM killer;
3. error lines that name their cause (``address_in_use``, ``device_error``, ``collective_timeout``
   in the log, ``disk_full``) before ``native_crash``: a process that aborts after such an
   error (MindSpore's C++ throws, glibc aborts) died of that error;
4. ``native_crash``: SIGSEGV / SIGABRT / SIGBUS / SIGILL / SIGFPE; a process killed by a signal was
   not ended by any Python traceback in its log, so no rule below looks at one then;
5. ``missing_module`` and ``missing_file`` before ``python_exception``: they are exceptions too;
6. ``python_exception``: the exception that ended the process, at the user's own frame.

Causes a restart cannot fix (:func:`same_unfixable`): the same Python exception at the same place,
the same missing module, the same missing file; :func:`repeated_unfixable` gives the line that stops
the restarts when the last two attempts failed so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from launcher.logs.causerules import TAIL_LINES, Facts, Failure, Found
from launcher.logs.causerules.errorlines import (
    match_address_in_use,
    match_collective_timeout_log,
    match_device_error,
    match_disk_full,
    match_native_crash,
)
from launcher.logs.causerules.exceptions import (
    match_missing_file,
    match_missing_module,
    match_python_exception,
    unknown,
)
from launcher.logs.causerules.judged import match_collective_timeout_report, match_hang_report, match_lost_host
from launcher.logs.causerules.oom import match_oom

__all__ = [
    "KINDS",
    "RESTART_PROOF",
    "RULES",
    "TAIL_LINES",
    "Cause",
    "Failure",
    "Rule",
    "classify",
    "console_lines",
    "junit_message",
    "repeated_unfixable",
    "same_unfixable",
]


@dataclass(frozen=True)
class Cause:
    """Why a process failed, as the console, summary.json (``root_cause.cause``), status, report
    and JUnit show it.

    Attributes:
        kind: one of :data:`KINDS`.
        evidence: the line or record that shows it (one line).
        hint: what to do (one line).
        key: what makes two causes of a kind in :data:`RESTART_PROOF` the same (exception type,
            message and user frame; module; path); None for other kinds and causes read from JSON.
    """

    kind: str
    evidence: str
    hint: str
    key: Optional[Tuple[str, ...]] = field(default=None, compare=False)

    def to_json(self) -> Dict[str, str]:
        return {"kind": self.kind, "evidence": self.evidence, "hint": self.hint}

    @classmethod
    def from_json(cls, data: Any) -> Optional["Cause"]:
        """The cause of a ``{"kind", "evidence", "hint"}`` object; None when it is not one."""
        if not isinstance(data, Mapping) or not all(isinstance(data.get(k), str) for k in ("kind", "evidence", "hint")):
            return None
        return cls(data["kind"], data["evidence"], data["hint"])


@dataclass(frozen=True)
class Rule:
    """One row of the table: the kind it gives, how it matches (and extracts the evidence), and its
    hint: a template filled from the found fields, ``host`` and ``name`` (a match may bring its own)."""

    kind: str
    match: Callable[[Facts], Optional[Found]]
    hint: str


#: The table, in precedence order (see the module doc).
RULES: Tuple[Rule, ...] = (
    Rule(
        "lost_host",
        match_lost_host,
        "check that {host} is up and reachable; a restart leaves a lost host out (docs/spare-hosts.md)",
    ),
    Rule(
        "collective_timeout",
        match_collective_timeout_report,
        "start with rank {rank} on {culprit_host}: the others waited for it in the collective (stacks in {stacks})",
    ),
    Rule(
        "hang",
        match_hang_report,
        "start with rank {rank} on {culprit_host} (stacks in {stacks}); if a step can take this long, raise "
        "--hang-timeout",
    ),
    Rule("oom", match_oom, "{host} ran out of memory: run fewer ranks per host or use a smaller batch"),
    Rule(
        "address_in_use",
        match_address_in_use,
        "a port is taken on {host}: run with --master-port auto (or free the port)",
    ),
    Rule("device_error", match_device_error, "a device or runtime error on {host}: read the error lines of the log"),
    Rule(
        "collective_timeout",
        match_collective_timeout_log,
        "this rank waited for the others: the cause is the rank that failed or stalled first (their logs, mslaunch "
        "status)",
    ),
    Rule("disk_full", match_disk_full, "free space on {host} (checkpoints, logs, /tmp), or write elsewhere"),
    Rule(
        "native_crash",
        match_native_crash,
        "a crash inside native code (the framework or a library), not a script error: read the native stack in the "
        "log, not the script",
    ),
    Rule(
        "missing_module",
        match_missing_module,
        "install {module} on {host} for the Python the ranks run there (or set --python to one that has it)",
    ),
    Rule(
        "missing_file",
        match_missing_file,
        "make {path} exist on {host} (copy it there or use a shared filesystem), or fix the path",
    ),
    Rule(
        "python_exception",
        match_python_exception,
        "the script raised {type} at {where}{function}: fix it there (a restart will not)",
    ),
)

#: Every kind a cause can have, ``unknown`` last.
KINDS: Tuple[str, ...] = tuple(dict.fromkeys(r.kind for r in RULES)) + ("unknown",)

#: Kinds a restart cannot fix when two attempts fail the same way.
RESTART_PROOF = ("python_exception", "missing_module", "missing_file")

_UNKNOWN_HINT = "no known cause matched: read the end of {log}"


class _Fields(dict):
    """Template fields; a field a template names but the match did not give renders as ``?``."""

    def __missing__(self, key: str) -> str:
        return "?"


def _hint(template: str, found: Found, failure: Failure) -> str:
    fields = _Fields(found.fields)
    fields.setdefault("host", failure.host or "its host")
    fields.setdefault("name", failure.name)
    return template.format_map(fields)


def classify(failure: Failure) -> Cause:
    """The cause of ``failure``: the first rule of :data:`RULES` that matches, else ``unknown``."""
    facts = Facts.of(failure)
    for rule in RULES:
        found = rule.match(facts)
        if found is not None:
            return Cause(rule.kind, found.evidence, _hint(found.hint or rule.hint, found, failure), found.key)
    found = unknown(facts)
    return Cause("unknown", found.evidence, _hint(found.hint or _UNKNOWN_HINT, found, failure))


def same_unfixable(a: Optional[Cause], b: Optional[Cause]) -> bool:
    """Whether two attempts failed with the same cause that a restart cannot fix: both of one kind
    of :data:`RESTART_PROOF` with the same key (the same exception type and message at the same
    user frame, the same module, the same path); causes without a key (read back from JSON)
    compare by kind and evidence."""
    if a is None or b is None or a.kind != b.kind or a.kind not in RESTART_PROOF:
        return False
    if a.key is not None and b.key is not None:
        return a.key == b.key
    return a.evidence == b.evidence


def repeated_unfixable(attempts: Sequence[Tuple[int, Optional[Cause]]]) -> Optional[str]:
    """The one line that stops the restarts when the last two attempts failed with the same cause a
    restart cannot fix (:func:`same_unfixable`), else None.

    Args:
        attempts: ``(attempt number, its cause)`` of the attempts so far, oldest first (those since
            the job was last re-planned: a host left out starts the count afresh).

    Returns:
        ``attempts 0 and 1 failed the same way (missing_module: ...), which a restart cannot fix: not restarting``.
    """
    if len(attempts) < 2:
        return None
    (k1, a), (k2, b) = attempts[-2], attempts[-1]
    if not same_unfixable(a, b):
        return None
    assert b is not None
    return (
        f"attempts {k1} and {k2} failed the same way ({b.kind}: {b.evidence}),"
        " which a restart cannot fix: not restarting"
    )


def console_lines(cause: Cause) -> List[str]:
    """The console's last lines about a cause: ``cause: <kind>: <evidence>`` and ``hint: <hint>``."""
    return [f"cause: {cause.kind}: {cause.evidence}", f"hint: {cause.hint}"]


def junit_message(cause: Cause, reason: Optional[str] = None) -> str:
    """The ``message`` of a JUnit ``<failure>``: ``<kind>: <evidence> (hint: <hint>)``, after the
    process's reason (``exit code 1``) when given."""
    text = f"{cause.kind}: {cause.evidence} (hint: {cause.hint})"
    return f"{reason}; {text}" if reason else text
