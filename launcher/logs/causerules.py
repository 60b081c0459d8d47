"""How each failure cause is recognised, and the evidence it gives (pure): the matchers that
:data:`launcher.logs.causes.RULES` lists, with the input they read (:class:`Failure`).

A matcher takes the :class:`Facts` of one failure and returns a :class:`Found` (the evidence: the
line or record it matched, the fields its hint names, and for causes a restart cannot fix the key
that tells two failures apart) or None.  Which matcher wins is the order of the table, not here.
"""
from __future__ import annotations

import re
import signal as _signal
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from launcher.logs.hostmem import HostRecords, cgroup_memory, format_bytes, kernel_kills, oom_kill_count
from launcher.logs.stacks import collective_timeout
from launcher.logs.tracebacks import PyException, exception_chain, native_crash, strip_ansi
from launcher.planning.job.kinds import signal_name

__all__ = ["EVIDENCE_MAX", "Facts", "Failure", "Found", "TAIL_LINES", "signal_of"]

#: Lines of a failed process's log the classifier reads (a MindSpore traceback with its sections
#: runs to 60+ lines, and the error line that names the cause comes before it).
TAIL_LINES = 400
#: Evidence longer than this is cut (with ``...``).
EVIDENCE_MAX = 300

#: Signals of a crash in native code.
NATIVE_SIGNALS = (_signal.SIGSEGV, _signal.SIGABRT, _signal.SIGBUS, _signal.SIGILL, _signal.SIGFPE)


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


#: MindSpore's log record prefix: ``[ERROR] DISTRIBUTED(41187,7f6a...,python):2026-11-26-07:40:11.512.003 [file.cc:281] Listen] ``.
_MS_PREFIX_RE = re.compile(r"^\s*\[(?:DEBUG|INFO|WARNING|ERROR|CRITICAL|EXCEPTION|TRACE)\] [\w_]+\([^)]*\):\S+ (?:\[[^\]]*\] ?\w*\] ?)?")


def message(line: str) -> str:
    """A log line without MindSpore's record prefix (level, module, pid, time, source), stripped."""
    return _MS_PREFIX_RE.sub("", line).strip()


def cut(text: str, n: int = EVIDENCE_MAX) -> str:
    """``text`` on one line, at most ``n`` characters (``...`` marks a cut)."""
    one = " ".join(text.split())
    return one if len(one) <= n else one[:n - 3].rstrip() + "..."


def _on(facts: Facts, host: Optional[str] = None) -> str:
    h = host if host is not None else facts.failure.host
    return f" (on {h})" if h else ""


def _where(exc: PyException) -> str:
    frame = exc.user_frame()
    return f" at {frame}" if frame is not None else ""


def _first(patterns: Sequence["re.Pattern[str]"], lines: Iterable[str]) -> Optional[Tuple[str, "re.Match[str]"]]:
    for line in lines:
        for p in patterns:
            m = p.search(line)
            if m:
                return line, m
    return None


def _exception_lines(facts: Facts) -> List[str]:
    """The lines of the ending exception chain, last exception first (message, then details)."""
    out: List[str] = []
    for exc in reversed(facts.chain):
        out.append(exc.line)
        out.extend(exc.details)
    return out


# ---------------------------------------------------------------- judged elsewhere: lost host, hang report

def match_lost_host(facts: Facts) -> Optional[Found]:
    """The supervisor lost the host (its connection, agent or node went away)."""
    lost = facts.failure.lost
    if not lost:
        return None
    return Found(cut(f"{facts.failure.name} on {facts.host}: {lost}"), {"how": lost})


def _report_fields(hang: Mapping[str, Any], facts: Facts) -> Dict[str, str]:
    culprit = hang.get("culprit") or {}
    rank = culprit.get("rank")
    hosts = {r.get("rank"): r.get("host") for r in hang.get("ranks") or [] if isinstance(r, Mapping)}
    return {"rank": "" if rank is None else str(rank), "culprit_host": str(hosts.get(rank) or facts.host),
            "why": str(culprit.get("evidence") or ""), "stacks": str(hang.get("stacks_dir") or "the attempt's stacks/ folder")}


def _culprit_text(fields: Mapping[str, str]) -> str:
    if not fields["rank"]:
        return "no rank stands out"
    return f"likely culprit rank {fields['rank']} on {fields['culprit_host']}: {fields['why']}"


def match_collective_timeout_report(facts: Facts) -> Optional[Found]:
    """The hang watch judged a rank's collective timeout (summary ``hang.kind`` ``collective_timeout``)."""
    hang = facts.failure.hang
    if not hang or hang.get("kind") != "collective_timeout":
        return None
    fields = _report_fields(hang, facts)
    t = hang.get("timed_out") or {}
    head = f"rank {t.get('rank')}'s collective timed out waiting for the others ({cut(str(t.get('line') or ''), 120)})"
    hint = None if fields["rank"] else ("no rank stands out: compare the ranks' stacks in {stacks}; a slow host or a broken "
                                        "link between hosts holds a collective (mslaunch doctor --health)")
    return Found(cut(f"{head}; {_culprit_text(fields)}"), fields, hint=hint)


def match_hang_report(facts: Facts) -> Optional[Found]:
    """The hang watch judged the attempt hung (no progress for the limit)."""
    hang = facts.failure.hang
    if not hang or hang.get("kind") == "collective_timeout":
        return None
    fields = _report_fields(hang, facts)
    head = f"no rank made progress for {hang.get('idle_s')} s (limit {hang.get('limit_s')} s, {hang.get('derived')})"
    hint = None if fields["rank"] else ("no rank stands out: compare the ranks' stacks in {stacks}; if a step can take "
                                        "this long, raise --hang-timeout")
    return Found(cut(f"{head}; {_culprit_text(fields)}"), fields, hint=hint)


# ---------------------------------------------------------------- host records: out of memory

def match_oom(facts: Facts) -> Optional[Found]:
    """SIGKILL, and the host says its OOM killer did it: a kernel line naming the process (one of
    ``pids``; any kill when no pid is known), or the cgroup's ``oom_kill`` count went up (counts
    when above 0 where the count before the start was not read)."""
    if facts.signal != _signal.SIGKILL:
        return None
    f = facts.failure
    rec = f.records
    kills = kernel_kills(rec.kernel)
    kill = next((k for k in reversed(kills) if k.pid in f.pids), None) if f.pids else (kills[-1] if kills else None)
    after, before = oom_kill_count(rec.cgroup), oom_kill_count(rec.cgroup_before)
    counted = after is not None and after > (before or 0)
    if kill is None and not counted:
        return None
    parts = ["killed by SIGKILL"]
    if kill is not None:
        parts.append(f"kernel: {cut(kill.summary, 160)}")
    if counted:
        parts.append(f"the cgroup's oom_kill count went from {before} to {after}" if before is not None else f"the cgroup's oom_kill count is {after}")
    peak, limit = cgroup_memory(rec.cgroup)
    if limit is None and kill is not None:
        limit = kill.limit
    if f.peak_rss is not None:
        parts.append(f"peak RSS {format_bytes(f.peak_rss)}")
    elif peak is not None:
        parts.append(f"peak memory {format_bytes(peak)} (cgroup)")
    if limit is not None:
        parts.append(f"limit {format_bytes(limit)}")
    return Found(cut("; ".join(parts)))


# ---------------------------------------------------------------- the log: errors that name their cause

_BIND_RES = (
    re.compile(r"\[Errno 98\] Address already in use|\bEADDRINUSE\b|address already in use", re.IGNORECASE),
    re.compile(r"Failed to (?:call )?bind\b.*?(?:url: )?(?:tcp://)?\S*?:(?P<port>\d{2,5})\b"),
    re.compile(r"port is (?P<port>\d+), bind fail|have been bound already"),
    re.compile(r"\bFailed to bind\b", re.IGNORECASE),
    re.compile(r"are all in use already"),
)
_PORT_RES = (re.compile(r"\bport(?: is|:)?\s*(\d{2,5})\b", re.IGNORECASE), re.compile(r"(?:tcp://|\b\d{1,3}(?:\.\d{1,3}){3}|\]):(\d{2,5})\b"),
             re.compile(r"\(['\"][^'\"]*['\"],\s*(\d{2,5})\)"))  # Python's address tuple: ('0.0.0.0', 8118)


def _port(line: str, m: "re.Match[str]") -> Optional[str]:
    port = m.groupdict().get("port")
    if port:
        return port
    for p in _PORT_RES:
        found = p.search(line)
        if found:
            return found.group(1)
    return None


def match_address_in_use(facts: Facts) -> Optional[Found]:
    """A port could not be bound: in the rank's log (its ending exception first), then in the
    scheduler's (``Failed to call bind, url: tcp://h:8118``, ``[Errno 98] Address already in use``,
    HCCL's ``port is 60000, bind fail``).  A list of possible reasons that names a port is not evidence."""
    f = facts.failure
    sources = [(_exception_lines(facts) + list(facts.lines), f.host, "")]
    if f.scheduler_tail and f.name != "scheduler":
        sources.append(([strip_ansi(x) for x in f.scheduler_tail[-TAIL_LINES:]], f.scheduler_host or f.host, "the scheduler's log: "))
    for lines, host, where in sources:
        hit = _first(_BIND_RES, lines)
        if hit is None:
            continue
        line, m = hit
        port = _port(line, m)
        fields = {"port": port or "", "bind_host": host or "its host"}
        hccl = "bind fail" in line or "bound already" in line
        if hccl:
            hint = "HCCL's port {port} on {bind_host} is taken (another job on the same devices?): end it, or move HCCL's ports with HCCL_IF_BASE_PORT"
        elif port:
            hint = "port {port} is taken on {bind_host}: run with --master-port auto (or free the port)"
        else:
            hint = "a port is taken on {bind_host}: run with --master-port auto (or free the port)"
        exc = facts.exception
        at = _where(exc) if exc is not None and not where and line == exc.line else ""
        return Found(cut(f"{where}{message(line)}{at}" + (f" (port {port})" if port and port not in line else "") + _on(facts, host)), fields,
                     hint=hint)
    return None


def match_collective_timeout_log(facts: Facts) -> Optional[Found]:
    """The rank's log says its collective gave up waiting (:func:`launcher.logs.stacks.collective_timeout`)."""
    lines = _exception_lines(facts) + list(facts.lines)
    found = collective_timeout(lines)
    if not found:
        return None
    whole = next((x for x in lines if x.strip().startswith(found[:200])), found)  # the line, not its first 300 characters
    return Found(cut(message(whole)))


_DEVICE_MEMORY_RE = re.compile(r"Malloc device memory failed|Out of Memory!!! Request memory size|Memory not enough|halMemAlloc failed|"
                               r"rtMalloc execute failed|cudaMalloc failed|CUDA out of memory|Device memory is not enough", re.IGNORECASE)
_ASCEND_CODE_RE = re.compile(r"(?<![\w])(?P<code>E[0-9A-Z]\d{4})(?=[:\]'])|module_name=(?P<code2>E[0-9A-Z]\d{4})\b")
_HCCL_RE = re.compile(r"HCCL init failed|hcclCommInitRootInfo|HcclCommInit\w* failed|hcom init failed|Init hccl graph adapter failed|"
                      r"Ascend collective communication initialization failed", re.IGNORECASE)
_NCCL_RE = re.compile(r"NCCL error|ncclCommInitRank failed|Initializing NCCL communicator failed|unhandled system error|NCCL WARN|"
                      r"Failed to get NCCL unique id")

#: Hints for the Ascend error codes whose cause is known (MindSpore's "CANN Common Error Analysis" page).
ASCEND_HINTS = {
    "EI0004": "the rank table does not match the hosts or devices: check it with mslaunch ranktable validate",
    "EI0005": "the ranks disagree on a collective's arguments: the script or the rank table differ between ranks",
    "EI0006": "HCCL could not connect to a peer: look for a rank that failed or started late, check the device network "
              "(hccn_tool), or raise HCCL_CONNECT_TIMEOUT",
    "EJ0001": "an earlier training process still holds the devices on {host}: wait for it to end (or end it), then start again",
    "EE1001": "a device id is out of range on {host}: check DEVICE_ID and the rank table's device_id values",
}
#: Codes of another cause: EI0002 (HCCL's notify wait timed out) is a collective timeout.
_NOT_DEVICE = ("EI0002",)
_MEMORY_HINT = ("the device ran out of memory (or another process holds it: check what runs on {host}'s devices): "
                "use a smaller batch or fewer ranks per device")


def match_device_error(facts: Facts) -> Optional[Found]:
    """A MindSpore device or runtime error: device memory, an Ascend error code (``EI0006``,
    ``EJ0001``, ``EE9999``, ...), HCCL or NCCL initialisation; the ending exception's lines first."""
    lines = _exception_lines(facts) + list(facts.lines)
    host = {"host": facts.host}
    hit = _first((_DEVICE_MEMORY_RE,), lines)
    if hit is not None:
        line, _ = hit
        return Found(cut(message(line)), host, hint=_MEMORY_HINT)
    hit = next(((x, m) for x in lines for m in _ASCEND_CODE_RE.finditer(x) if (m.group("code") or m.group("code2")) not in _NOT_DEVICE), None)
    if hit is not None:
        line, m = hit
        code = m.group("code") or m.group("code2")
        text = line[m.start():].strip() if m.group("code") else line.strip()
        hint = ASCEND_HINTS.get(code, "look up " + code + " under 'Ascend Error Message' at mindspore.cn: the lines after the code "
                                      "in the log give the reason and a solution")
        return Found(cut(text), dict(host, code=code), hint=hint)
    hit = _first((_HCCL_RE,), lines)
    if hit is not None:
        return Found(cut(message(hit[0])), host, hint="HCCL could not start on {host}: check the rank table (mslaunch ranktable "
                                                     "validate) and the device IPs (hccn.conf)")
    hit = _first((_NCCL_RE,), lines)
    if hit is not None:
        return Found(cut(message(hit[0])), host, hint="NCCL could not set up on {host}: check NCCL_SOCKET_IFNAME and that the hosts "
                                                     "reach each other (NCCL_DEBUG=INFO says more)")
    return None


_ENOSPC_RE = re.compile(r"No space left on device|\bENOSPC\b|\[Errno 28\]")
_ENOSPC_PATH_RE = re.compile(r"No space left on device['\"]?\s*:\s*(?:(?P<q>['\"])(?P<qpath>.+?)(?P=q)|(?P<path>[^'\"\s,]+))")


def match_disk_full(facts: Facts) -> Optional[Found]:
    """No space left on a device (``[Errno 28]``, ``ENOSPC``): the ending exception chain first, then any line."""
    for exc in reversed(facts.chain):
        if _ENOSPC_RE.search(exc.text):
            return _disk_full(f"{exc.line}{_where(exc)}", _enospc_path(exc.text))
    hit = _first((_ENOSPC_RE,), facts.lines)
    if hit is None:
        return None
    return _disk_full(message(hit[0]), _enospc_path(hit[0]))


def _enospc_path(text: str) -> Optional[str]:
    m = _ENOSPC_PATH_RE.search(text)
    return (m.group("qpath") or m.group("path")) if m else None


def _disk_full(evidence: str, path: Optional[str]) -> Found:
    if path:
        return Found(cut(evidence), {"path": path}, hint="free space on {host} where {path} is written (checkpoints, logs, /tmp), or write elsewhere")
    return Found(cut(evidence), {}, hint="free space on {host} (checkpoints, logs, /tmp), or write elsewhere")


def match_native_crash(facts: Facts) -> Optional[Found]:
    """SIGSEGV, SIGABRT, SIGBUS, SIGILL or SIGFPE: the fatal-error line and the crashing frame when
    the log has a faulthandler dump or a native stack."""
    if facts.signal not in NATIVE_SIGNALS:
        return None
    crash = native_crash(facts.lines)
    parts = [signal_name(facts.signal)]  # type: ignore[arg-type]
    if crash.error:
        parts.append(crash.error)
    if crash.frame:
        parts.append(f"in {crash.frame}" + (f", called from {crash.caller}" if crash.caller else ""))
    if not crash.error and not crash.frame:
        parts.append(f"the log ends: {_last_line(facts.lines)}")
    return Found(cut("; ".join(parts)), {"frame": crash.frame or ""})


# ---------------------------------------------------------------- the ending exception

_NO_MODULE_RE = re.compile(r"No module named '?(?P<module>[\w.]+)'?")
_CANNOT_IMPORT_RE = re.compile(r"cannot import name '(?P<name>[\w.]+)' from '(?P<module>[\w.]+)'")
_SHARED_LIB_RE = re.compile(r"(?P<module>[\w.+-]+\.so[\w.]*): cannot open shared object file")


def match_missing_module(facts: Facts) -> Optional[Found]:
    """A module (or shared library) the script imports is not installed where it ran: in the ending
    exception chain (``ModuleNotFoundError``, ``ImportError``, or an exception raised while handling
    one), or, without a traceback, ``python -m``'s ``No module named x``."""
    for exc in reversed(facts.chain):
        for p in (_NO_MODULE_RE, _CANNOT_IMPORT_RE, _SHARED_LIB_RE):
            m = p.search(exc.message)
            if m and (exc.name in ("ModuleNotFoundError", "ImportError") or p is _NO_MODULE_RE):
                return _missing_module(facts, m.group("module"), f"{exc.line}{_where(exc)}")
    if facts.exception is None and facts.signal is None:
        for line in reversed(facts.lines):
            m = _NO_MODULE_RE.search(line)
            if m and ("python" in line.lower() or "Error while finding module" in line or re.search(r"(ModuleNotFound|Import)Error: No module", line)):
                return _missing_module(facts, m.group("module"), line.strip())
    return None


def _missing_module(facts: Facts, module: str, evidence: str) -> Found:
    return Found(cut(evidence + _on(facts)), {"module": module}, key=("missing_module", module))


_NO_FILE_RES = (
    re.compile(r"\[Errno 2\] No such file or directory: (?P<q>['\"])(?P<path>.+?)(?P=q)(?:$|\s|,)"),
    re.compile(r"The (?:folder|file) (?P<path>\S+) does not exist or (?:is not a directory or )?permission denied"),
    re.compile(r"Invalid file, failed to open (?:file|folder|json file)?:?\s*(?P<path>[^\s,]+)"),
)
_NO_FILE_LINE_RES = (
    re.compile(r"can't open file (?P<q>['\"])(?P<path>.+?)(?P=q): \[Errno 2\]"),
    # also after mslaunch's own prefix: "mslaunch: the mslaunch agent on h3 exited with status 127: bash: line 1: ..."
    re.compile(r"(?:^|: )(?:/bin/|/usr/bin/)?(?:ba|z)?sh: (?:line \d+: )?(?P<path>[^:\s]+): (?:No such file or directory|command not found)$"),
    re.compile(r"(?:^|: )env: '?(?P<path>[^':]+)'?: No such file or directory$"),
)


def match_missing_file(facts: Facts) -> Optional[Found]:
    """A file or folder the job needs is not where it ran: ``FileNotFoundError`` (or any
    ``[Errno 2]``) in the ending exception chain, MindSpore's dataset errors for a missing path, or,
    without a traceback, the interpreter or shell saying the script or program is not there."""
    for exc in reversed(facts.chain):
        for p in _NO_FILE_RES:
            m = p.search(exc.text)
            if m:
                return _missing_file(facts, m.group("path"), f"{exc.line}{_where(exc)}")
    if facts.exception is None and facts.signal is None:
        for line in reversed(facts.lines):
            for p in _NO_FILE_LINE_RES + _NO_FILE_RES:
                m = p.search(line.strip())
                if m:
                    return _missing_file(facts, m.group("path"), line.strip())
    return None


def _missing_file(facts: Facts, path: str, evidence: str) -> Found:
    name = path.rstrip("/").rpartition("/")[2]
    hint = ("{path} is not on {host}: install that Python there, or set --python to one that is"
            if name.startswith("python") else None)
    return Found(cut(evidence + _on(facts)), {"path": path}, key=("missing_file", path), hint=hint)


_HEX_RE = re.compile(r"0x[0-9a-fA-F]{4,}")


def match_python_exception(facts: Facts) -> Optional[Found]:
    """The Python exception that ended the process: its type, message and innermost frame of the
    user's own files (MindSpore's ``Python Call Stack`` section first)."""
    exc = facts.exception
    if exc is None:
        return None
    frame = exc.user_frame()
    where = frame.where if frame is not None else ""
    fields = {"type": exc.name, "where": where, "function": f" ({frame.function})" if frame is not None and frame.function else ""}
    key = ("python_exception", exc.type, _HEX_RE.sub("0x?", exc.message), where)
    hint = None
    if frame is None:
        inner = exc.frames[-1] if exc.frames else None
        hint = (f"the traceback has no frame of the script's own files (innermost: {inner}): read it in the log"
                if inner is not None else "the log has the exception but not its traceback: read the log")
    return Found(cut(f"{exc.line}{_where(exc)}"), fields, key=key, hint=hint)


def _last_line(lines: Sequence[str]) -> str:
    return next((x.strip() for x in reversed(lines) if x.strip()), "(empty log)")


def unknown(facts: Facts) -> Found:
    """Nothing matched: the log's last non-empty line (after the signal, when one ended it)."""
    last = cut(_last_line(facts.lines))
    if facts.signal is not None:
        sig = signal_name(facts.signal)
        if facts.signal == _signal.SIGKILL:
            rec = facts.failure.records
            found = "no OOM record was found" if rec.kernel or rec.cgroup else "there are no host records from {host} (read for local ranks only)"
            return Found(cut(f"killed by SIGKILL; the log ends: {last}"), {"log": facts.failure.log or "its log"},
                         hint="SIGKILL came from outside mslaunch and " + found + ": check the kernel log on {host} "
                              "(dmesg: the OOM killer) or who killed it")
        return Found(cut(f"killed by {sig}; the log ends: {last}"), {"log": facts.failure.log or "its log"})
    return Found(last, {"log": facts.failure.log or "its log"})
