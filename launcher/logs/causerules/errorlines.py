"""The log's error lines that name their cause (a port taken, a collective that gave up waiting, a
device or runtime error, a full disk), and native crashes (a process a crash signal ended).
"""

from __future__ import annotations

import re
import signal as _signal
from typing import Optional

from launcher.logs.causerules import (
    TAIL_LINES,
    Facts,
    Found,
    at_user_frame,
    cut,
    exception_lines,
    first_match,
    last_line,
    message,
    on_host,
)
from launcher.logs.stacks import collective_timeout
from launcher.logs.tracebacks import native_crash, strip_ansi
from launcher.planning.job.kinds import signal_name

#: Signals of a crash in native code.
NATIVE_SIGNALS = (_signal.SIGSEGV, _signal.SIGABRT, _signal.SIGBUS, _signal.SIGILL, _signal.SIGFPE)

_BIND_RES = (
    re.compile(r"\[Errno 98\] Address already in use|\bEADDRINUSE\b|address already in use", re.IGNORECASE),
    re.compile(r"Failed to (?:call )?bind\b.*?(?:url: )?(?:tcp://)?\S*?:(?P<port>\d{2,5})\b"),
    re.compile(r"port is (?P<port>\d+), bind fail|have been bound already"),
    re.compile(r"\bFailed to bind\b", re.IGNORECASE),
    re.compile(r"are all in use already"),
)
_PORT_RES = (
    re.compile(r"\bport(?: is|:)?\s*(\d{2,5})\b", re.IGNORECASE),
    re.compile(r"(?:tcp://|\b\d{1,3}(?:\.\d{1,3}){3}|\]):(\d{2,5})\b"),
    re.compile(r"\(['\"][^'\"]*['\"],\s*(\d{2,5})\)"),
)  # Python's address tuple: ('0.0.0.0', 8118)


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
    sources = [(exception_lines(facts) + list(facts.lines), f.host, "")]
    if f.scheduler_tail and f.name != "scheduler":
        sources.append(
            (
                [strip_ansi(x) for x in f.scheduler_tail[-TAIL_LINES:]],
                f.scheduler_host or f.host,
                "the scheduler's log: ",
            )
        )
    for lines, host, where in sources:
        hit = first_match(_BIND_RES, lines)
        if hit is None:
            continue
        line, m = hit
        port = _port(line, m)
        fields = {"port": port or "", "bind_host": host or "its host"}
        hccl = "bind fail" in line or "bound already" in line
        if hccl:
            hint = (
                "HCCL's port {port} on {bind_host} is taken (another job on the same devices?): end it,"
                " or move HCCL's ports with HCCL_IF_BASE_PORT"
            )
        elif port:
            hint = "port {port} is taken on {bind_host}: run with --master-port auto (or free the port)"
        else:
            hint = "a port is taken on {bind_host}: run with --master-port auto (or free the port)"
        exc = facts.exception
        at = at_user_frame(exc) if exc is not None and not where and line == exc.line else ""
        return Found(
            cut(
                f"{where}{message(line)}{at}"
                + (f" (port {port})" if port and port not in line else "")
                + on_host(facts, host)
            ),
            fields,
            hint=hint,
        )
    return None


def match_collective_timeout_log(facts: Facts) -> Optional[Found]:
    """The rank's log says its collective gave up waiting (:func:`launcher.logs.stacks.collective_timeout`)."""
    lines = exception_lines(facts) + list(facts.lines)
    found = collective_timeout(lines)
    if not found:
        return None
    whole = next(
        (x for x in lines if x.strip().startswith(found[:200])), found
    )  # the line, not its first 300 characters
    return Found(cut(message(whole)))


_DEVICE_MEMORY_RE = re.compile(
    r"Malloc device memory failed|Out of Memory!!! Request memory size|Memory not enough|halMemAlloc failed|"
    r"rtMalloc execute failed|cudaMalloc failed|CUDA out of memory|Device memory is not enough",
    re.IGNORECASE,
)
_ASCEND_CODE_RE = re.compile(r"(?<![\w])(?P<code>E[0-9A-Z]\d{4})(?=[:\]'])|module_name=(?P<code2>E[0-9A-Z]\d{4})\b")
_HCCL_RE = re.compile(
    r"HCCL init failed|hcclCommInitRootInfo|HcclCommInit\w* failed|hcom init failed|Init hccl graph adapter failed|"
    r"Ascend collective communication initialization failed",
    re.IGNORECASE,
)
_NCCL_RE = re.compile(
    r"NCCL error|ncclCommInitRank failed|Initializing NCCL communicator failed|unhandled system error|NCCL WARN|"
    r"Failed to get NCCL unique id"
)

#: Hints for the Ascend error codes whose cause is known (MindSpore's "CANN Common Error Analysis" page).
ASCEND_HINTS = {
    "EI0004": "the rank table does not match the hosts or devices: check it with mslaunch ranktable validate",
    "EI0005": "the ranks disagree on a collective's arguments: the script or the rank table differ between ranks",
    "EI0006": "HCCL could not connect to a peer: look for a rank that failed or started late, check the device network "
    "(hccn_tool), or raise HCCL_CONNECT_TIMEOUT",
    "EJ0001": "an earlier training process still holds the devices on {host}: wait for it to end (or end it), then "
    "start again",
    "EE1001": "a device id is out of range on {host}: check DEVICE_ID and the rank table's device_id values",
}
#: Codes of another cause: EI0002 (HCCL's notify wait timed out) is a collective timeout.
_NOT_DEVICE = ("EI0002",)
_MEMORY_HINT = (
    "the device ran out of memory (or another process holds it: check what runs on {host}'s devices): "
    "use a smaller batch or fewer ranks per device"
)


def match_device_error(facts: Facts) -> Optional[Found]:
    """A MindSpore device or runtime error: device memory, an Ascend error code (``EI0006``,
    ``EJ0001``, ``EE9999``, ...), HCCL or NCCL initialisation; the ending exception's lines first."""
    lines = exception_lines(facts) + list(facts.lines)
    host = {"host": facts.host}
    hit = first_match((_DEVICE_MEMORY_RE,), lines)
    if hit is not None:
        line, _ = hit
        return Found(cut(message(line)), host, hint=_MEMORY_HINT)
    hit = next(
        (
            (x, m)
            for x in lines
            for m in _ASCEND_CODE_RE.finditer(x)
            if (m.group("code") or m.group("code2")) not in _NOT_DEVICE
        ),
        None,
    )
    if hit is not None:
        line, m = hit
        code = m.group("code") or m.group("code2")
        text = line[m.start() :].strip() if m.group("code") else line.strip()
        hint = ASCEND_HINTS.get(
            code,
            "look up " + code + " under 'Ascend Error Message' at mindspore.cn: the lines after the code "
            "in the log give the reason and a solution",
        )
        return Found(cut(text), dict(host, code=code), hint=hint)
    hit = first_match((_HCCL_RE,), lines)
    if hit is not None:
        return Found(
            cut(message(hit[0])),
            host,
            hint="HCCL could not start on {host}: check the rank table (mslaunch ranktable "
            "validate) and the device IPs (hccn.conf)",
        )
    hit = first_match((_NCCL_RE,), lines)
    if hit is not None:
        return Found(
            cut(message(hit[0])),
            host,
            hint="NCCL could not set up on {host}: check NCCL_SOCKET_IFNAME and that the hosts "
            "reach each other (NCCL_DEBUG=INFO says more)",
        )
    return None


_ENOSPC_RE = re.compile(r"No space left on device|\bENOSPC\b|\[Errno 28\]")
_ENOSPC_PATH_RE = re.compile(
    r"No space left on device['\"]?\s*:\s*(?:(?P<q>['\"])(?P<qpath>.+?)(?P=q)|(?P<path>[^'\"\s,]+))"
)


def match_disk_full(facts: Facts) -> Optional[Found]:
    """No space left on a device (``[Errno 28]``, ``ENOSPC``): the ending exception chain first, then any line."""
    for exc in reversed(facts.chain):
        if _ENOSPC_RE.search(exc.text):
            return _disk_full(f"{exc.line}{at_user_frame(exc)}", _enospc_path(exc.text))
    hit = first_match((_ENOSPC_RE,), facts.lines)
    if hit is None:
        return None
    return _disk_full(message(hit[0]), _enospc_path(hit[0]))


def _enospc_path(text: str) -> Optional[str]:
    m = _ENOSPC_PATH_RE.search(text)
    return (m.group("qpath") or m.group("path")) if m else None


def _disk_full(evidence: str, path: Optional[str]) -> Found:
    if path:
        return Found(
            cut(evidence),
            {"path": path},
            hint="free space on {host} where {path} is written (checkpoints, logs, /tmp), or write elsewhere",
        )
    return Found(cut(evidence), {}, hint="free space on {host} (checkpoints, logs, /tmp), or write elsewhere")


#: MindSpore's scheduler logs a worker's registration (its node id, its rank) and its unregistration,
#: which the worker's exit cleanup sends once its program has ended.
_REGISTERED = re.compile(r"The new node: (\S+)\(role: MS_WORKER\), rank id: (\d+)")
_UNREGISTERED = re.compile(r"\bNode (\S+) has unregistered")
_LEFT_HINT = (
    "it crashed in the framework's exit cleanup, after its program had ended and it had left the cluster: what the"
    " program wrote is complete; the crash is the framework's (read the native stack in the log)"
)


def left_cluster(facts: Facts) -> Optional[str]:
    """The scheduler's line that says this rank left the cluster (unregistered: its program had
    ended), or None. Its node id is the one its registration line gives its rank, else the rank
    (mslaunch sets ``MS_NODE_ID`` to it)."""
    f = facts.failure
    rank = f.name[len("rank ") :] if f.name.startswith("rank ") else ""
    if not rank.isdigit() or not f.scheduler_tail:
        return None
    lines = [strip_ansi(x) for x in f.scheduler_tail[-TAIL_LINES:]]
    nodes = {node for line in lines for node, r in _REGISTERED.findall(line) if r == rank} or {rank}
    return next((line for line in lines for node in _UNREGISTERED.findall(line) if node in nodes), None)


def match_native_crash(facts: Facts) -> Optional[Found]:
    """SIGSEGV, SIGABRT, SIGBUS, SIGILL or SIGFPE: the fatal-error line and the crashing frame when
    the log has a faulthandler dump or a native stack; and, for a rank the scheduler saw leave the
    cluster before, that the crash came after its program had ended (MindSpore's exit cleanup)."""
    if facts.signal not in NATIVE_SIGNALS:
        return None
    crash = native_crash(facts.lines)
    parts = [signal_name(facts.signal)]
    left = left_cluster(facts)
    if left:
        parts.append(f"after it left the cluster (the scheduler's log: {message(left)})")
    if crash.error:
        parts.append(crash.error)
    if crash.frame:
        parts.append(f"in {crash.frame}" + (f", called from {crash.caller}" if crash.caller else ""))
    if not crash.error and not crash.frame:
        parts.append(f"the log ends: {last_line(facts.lines)}")
    return Found(cut("; ".join(parts)), {"frame": crash.frame or ""}, hint=_LEFT_HINT if left else None)
