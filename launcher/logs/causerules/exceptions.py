"""The exception that ended the process: a module or file missing where it ran, any other Python
exception; and ``unknown``, when nothing matched.
"""

from __future__ import annotations

import re
import signal as _signal
from typing import Optional

from launcher.logs.causerules import Facts, Found, at_user_frame, cut, last_line, on_host
from launcher.planning.job.kinds import signal_name

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
                return _missing_module(facts, m.group("module"), f"{exc.line}{at_user_frame(exc)}")
    if facts.exception is None and facts.signal is None:
        for line in reversed(facts.lines):
            m = _NO_MODULE_RE.search(line)
            if m and (
                "python" in line.lower()
                or "Error while finding module" in line
                or re.search(r"(ModuleNotFound|Import)Error: No module", line)
            ):
                return _missing_module(facts, m.group("module"), line.strip())
    return None


def _missing_module(facts: Facts, module: str, evidence: str) -> Found:
    return Found(cut(evidence + on_host(facts)), {"module": module}, key=("missing_module", module))


_NO_FILE_RES = (
    re.compile(r"\[Errno 2\] No such file or directory: (?P<q>['\"])(?P<path>.+?)(?P=q)(?:$|\s|,)"),
    re.compile(r"The (?:folder|file) (?P<path>\S+) does not exist or (?:is not a directory or )?permission denied"),
    re.compile(r"Invalid file, failed to open (?:file|folder|json file)?:?\s*(?P<path>[^\s,]+)"),
)
_NO_FILE_LINE_RES = (
    re.compile(r"can't open file (?P<q>['\"])(?P<path>.+?)(?P=q): \[Errno 2\]"),
    # also after mslaunch's own prefix: "mslaunch: the mslaunch agent on h3 exited with status 127: bash: line 1: ..."
    re.compile(
        r"(?:^|: )(?:/bin/|/usr/bin/)?(?:ba|z)?sh: (?:line \d+: )?(?P<path>[^:\s]+): (?:No such file or "
        r"directory|command not found)$"
    ),
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
                return _missing_file(facts, m.group("path"), f"{exc.line}{at_user_frame(exc)}")
    if facts.exception is None and facts.signal is None:
        for line in reversed(facts.lines):
            for p in _NO_FILE_LINE_RES + _NO_FILE_RES:
                m = p.search(line.strip())
                if m:
                    return _missing_file(facts, m.group("path"), line.strip())
    return None


def _missing_file(facts: Facts, path: str, evidence: str) -> Found:
    name = path.rstrip("/").rpartition("/")[2]
    hint = (
        "{path} is not on {host}: install that Python there, or set --python to one that is"
        if name.startswith("python")
        else None
    )
    return Found(cut(evidence + on_host(facts)), {"path": path}, key=("missing_file", path), hint=hint)


_HEX_RE = re.compile(r"0x[0-9a-fA-F]{4,}")


def match_python_exception(facts: Facts) -> Optional[Found]:
    """The Python exception that ended the process: its type, message and innermost frame of the
    user's own files (MindSpore's ``Python Call Stack`` section first)."""
    exc = facts.exception
    if exc is None:
        return None
    frame = exc.user_frame()
    where = frame.where if frame is not None else ""
    fields = {
        "type": exc.name,
        "where": where,
        "function": f" ({frame.function})" if frame is not None and frame.function else "",
    }
    key = ("python_exception", exc.type, _HEX_RE.sub("0x?", exc.message), where)
    hint = None
    if frame is None:
        inner = exc.frames[-1] if exc.frames else None
        hint = (
            f"the traceback has no frame of the script's own files (innermost: {inner}): read it in the log"
            if inner is not None
            else "the log has the exception but not its traceback: read the log"
        )
    return Found(cut(f"{exc.line}{at_user_frame(exc)}"), fields, key=key, hint=hint)


def unknown(facts: Facts) -> Found:
    """Nothing matched: the log's last non-empty line (after the signal, when one ended it)."""
    last = cut(last_line(facts.lines))
    if facts.signal is not None:
        sig = signal_name(facts.signal)
        if facts.signal == _signal.SIGKILL:
            rec = facts.failure.records
            found = (
                "no OOM record was found"
                if rec.kernel or rec.cgroup
                else "there are no host records from {host} (read for local ranks only)"
            )
            return Found(
                cut(f"killed by SIGKILL; the log ends: {last}"),
                {"log": facts.failure.log or "its log"},
                hint="SIGKILL came from outside mslaunch and " + found + ": check the kernel log on {host} "
                "(dmesg: the OOM killer) or who killed it",
            )
        return Found(cut(f"killed by {sig}; the log ends: {last}"), {"log": facts.failure.log or "its log"})
    return Found(last, {"log": facts.failure.log or "its log"})
