"""Reading how a process ended from the end of its log: Python tracebacks, faulthandler dumps and
native stacks (pure: lines in, values out).

A Python traceback as CPython prints it (frames outermost first; 3.11+ adds caret lines)::

    Traceback (most recent call last):
      File "/job/train.py", line 14, in load_config
        return settings["batch_size"]
               ~~~~~~~~^^^^^^^^^^^^^^
    KeyError: 'batch_size'

Chained tracebacks are joined by ``During handling of the above exception, another exception
occurred:`` or ``The above exception was the direct cause of the following exception:``; the last
one is the exception that ended the process.  MindSpore's errors carry their own sections after the
exception line (they belong to its message)::

    RuntimeError: Ascend collective communication initialization failed.

    ----------------------------------------------------
    - Ascend Error Message:
    ----------------------------------------------------
    EJ0001: Failed to initialize the HCCP process. ...

    ----------------------------------------------------
    - C++ Call Stack: (For framework developers)
    ----------------------------------------------------
    mindspore/ccsrc/plugin/device/ascend/hal/hccl_adapter/hccl_adapter.cc:402 InitKernelInfoStore

A faulthandler dump (``python -X faulthandler``, or ``faulthandler.enable()``) lists frames
innermost first, with no comma before ``in``::

    Fatal Python error: Segmentation fault

    Current thread 0x00007f18d2c1ab80 (most recent call first):
      File "/usr/lib/python3.11/ctypes/__init__.py", line 519 in string_at
      File "/job/native.py", line 9 in native_step

A native stack as gdb, sanitizers and some runtimes print it: ``#0 0x00007f... in foo () at x.cc:12``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

__all__ = ["NativeCrash", "PyException", "PyFrame", "exception_chain", "is_user_file", "native_crash", "strip_ansi"]

_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_TB_HEAD_RE = re.compile(r"Traceback \(most recent call last\):\s*$")
_FRAME_RE = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)(?:, in (?P<func>.+?))?\s*$')
_CHAIN_RE = re.compile(
    r"^\s*(During handling of the above exception, another exception occurred:|"
    r"The above exception was the direct cause of the following exception:)\s*$"
)
_EXC_RE = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?::\s?(?P<msg>.*))?$")
#: A line that starts another log record: the exception's message ends before it.
_RECORD_RE = re.compile(
    r"^\s*(\[(?:DEBUG|INFO|WARNING|ERROR|CRITICAL|EXCEPTION|TRACE)\]|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d{4}-|"
    r"Traceback \(most recent call last\):|Fatal Python error:)"
)
_SECTION_RE = re.compile(r"^-\s+(?P<name>[^:]+?):(?:\s*\(For framework developers\))?\s*$")
_DASHES_RE = re.compile(r"^-{10,}\s*$")
#: How many lines after the exception line can belong to its message (MindSpore's sections).
_MAX_DETAIL = 80

#: MindSpore's own Python packages: frames there are the framework's, not the user's.
_MINDSPORE_PARTS = (
    "_extends",
    "_checkparam.py",
    "amp.py",
    "boost",
    "common",
    "communication",
    "context.py",
    "dataset",
    "experimental",
    "graph",
    "hal",
    "mindrecord",
    "mint",
    "nn",
    "numpy",
    "ops",
    "parallel",
    "profiler",
    "rewrite",
    "runtime",
    "train",
    "utils",
    "log.py",
)
_LIBRARY_RE = re.compile(
    r"(^|[/\\])(site-packages|dist-packages)[/\\]|(^|[/\\])lib(64)?[/\\]python\d+(\.\d+)?[/\\]|^<frozen |^<string>$|"
    r"(^|[/\\])mindspore[/\\](" + "|".join(re.escape(p) for p in _MINDSPORE_PARTS) + r")\b"
)


def strip_ansi(line: str) -> str:
    """``line`` without ANSI colour codes and trailing whitespace (a log may be coloured)."""
    return _ANSI_RE.sub("", line).rstrip()


def is_user_file(path: str) -> bool:
    """Whether a frame's file is the user's own: not site-packages / dist-packages, not the Python
    standard library (``.../lib/python3.X/...``), not MindSpore's packages, not ``<frozen ...>``."""
    return not _LIBRARY_RE.search(path)


@dataclass(frozen=True)
class PyFrame:
    """One frame: ``file:line`` in ``function`` (None where the trace does not name it)."""

    file: str
    line: int
    function: Optional[str] = None

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    def __str__(self) -> str:
        return self.where + (f" ({self.function})" if self.function else "")


@dataclass(frozen=True)
class PyException:
    """One exception of a traceback.

    Attributes:
        type: its type as printed (``KeyError``, ``json.decoder.JSONDecodeError``).
        message: the rest of its line (``'batch_size'``), empty when it has none.
        details: the lines after it that belong to its message (MindSpore's sections), trailing blanks dropped.
        frames: the traceback's frames, outermost first (empty when the tail cut them off).
        index: the index of its line in the lines it was read from.
    """

    type: str
    message: str
    details: Tuple[str, ...] = ()
    frames: Tuple[PyFrame, ...] = ()
    index: int = -1

    @property
    def name(self) -> str:
        """The type's last component (``JSONDecodeError``)."""
        return self.type.rpartition(".")[2]

    @property
    def line(self) -> str:
        """``Type: message`` as printed."""
        return f"{self.type}: {self.message}" if self.message else self.type

    @property
    def text(self) -> str:
        """The message with its details, one string."""
        return "\n".join((self.message,) + self.details)

    def sections(self) -> Dict[str, Tuple[str, ...]]:
        """MindSpore's sections of the details: ``{"C++ Call Stack": (lines...), ...}``."""
        out: Dict[str, List[str]] = {}
        current: Optional[str] = None
        for line in self.details:
            s = line.strip()
            m = _SECTION_RE.match(s)
            if m:
                current = m.group("name").strip()
                out[current] = []
            elif current is not None and s and not _DASHES_RE.match(s):
                out[current].append(s)
        return {k: tuple(v) for k, v in out.items()}

    def user_frame(self) -> Optional[PyFrame]:
        """The innermost frame in the user's own files (:func:`is_user_file`): in MindSpore's
        ``Python Call Stack`` section when it names one, else in the traceback; None without one."""
        for name, lines in self.sections().items():
            if name.lower().startswith("python call stack"):
                listed = [f for f in (_section_frame(line) for line in lines) if f is not None and is_user_file(f.file)]
                if listed:
                    return listed[-1]
        for frame in reversed(self.frames):
            if is_user_file(frame.file):
                return frame
        return None


_IN_FILE_RE = re.compile(r"In file (?P<file>.+?)[:(](?P<line>\d+)")


def _section_frame(line: str) -> Optional[PyFrame]:
    m = _FRAME_RE.match(line)
    if m:
        return PyFrame(m.group("file"), int(m.group("line")), m.group("func"))
    m = _IN_FILE_RE.search(line)
    if m:
        return PyFrame(m.group("file").strip(), int(m.group("line")))
    return None


def _frames_before(lines: Sequence[str], end: int) -> Tuple[Tuple[PyFrame, ...], int]:
    """The frames of the traceback whose exception line is ``lines[end]`` and the index where its
    frame region starts (walking back over frame, code and caret lines)."""
    frames: List[PyFrame] = []
    i = end - 1
    while i >= 0:
        line = lines[i]
        m = _FRAME_RE.match(line)
        if m:
            frames.append(PyFrame(m.group("file"), int(m.group("line")), m.group("func")))
        elif not line.startswith("    ") or not line.strip():
            break
        i -= 1
    return tuple(reversed(frames)), i + 1


def _exception_at(lines: Sequence[str], start: int) -> Optional[PyException]:
    """The exception line after the frames that follow ``lines[start]`` (a ``Traceback`` header or
    the first frame line), with its frames and details."""
    i = start
    n = len(lines)
    if i < n and _TB_HEAD_RE.search(lines[i]):
        i += 1
    while i < n and (_FRAME_RE.match(lines[i]) or (lines[i].startswith("    ") and lines[i].strip())):
        i += 1
    if i >= n:
        return None
    m = _EXC_RE.match(lines[i].strip())
    if not m or lines[i].startswith(" "):
        return None
    frames, _ = _frames_before(lines, i)
    details: List[str] = []
    j = i + 1
    while j < n and len(details) < _MAX_DETAIL and not _RECORD_RE.match(lines[j]) and not _CHAIN_RE.match(lines[j]):
        details.append(lines[j])
        j += 1
    while details and not details[-1].strip():
        details.pop()
    return PyException(m.group("type"), (m.group("msg") or "").strip(), tuple(details), frames, i)


def _unprefixed(lines: List[str]) -> List[str]:
    """``lines`` without the prefix a launcher put on every line (``[rank1]: ``), when the last
    ``Traceback`` header and the frame line after it carry the same one."""
    for i in range(len(lines) - 1, -1, -1):
        m = _TB_HEAD_RE.search(lines[i])
        if m:
            pre = lines[i][: m.start()]
            if (
                pre.strip()
                and i + 1 < len(lines)
                and lines[i + 1].startswith(pre)
                and _FRAME_RE.match(lines[i + 1][len(pre) :])
            ):
                return [x[len(pre) :] if x.startswith(pre) else x for x in lines]
            break
    return lines


def exception_chain(lines: Sequence[str]) -> List[PyException]:
    """The exceptions of the last traceback in ``lines`` with the ones chained before it, oldest
    first: the last one ended the process (when an exception did).  [] when the lines hold no traceback.

    A tail that cut off the ``Traceback`` header still yields the exception after its frames; a
    prefix on every line of the traceback (``[rank1]: ``) is dropped.
    """
    clean = _unprefixed([strip_ansi(x) for x in lines])
    starts = [i for i, x in enumerate(clean) if _TB_HEAD_RE.search(x)]
    last_frame = max((i for i, x in enumerate(clean) if _FRAME_RE.match(x)), default=-1)
    if last_frame > (starts[-1] if starts else -1):  # frames after the last header (or no header at all: cut off)
        _, first = _frames_before(clean, last_frame + 1)
        starts.append(first)
    if not starts:
        return []
    chain: List[PyException] = []
    for k in range(len(starts) - 1, -1, -1):
        exc = _exception_at(clean, starts[k])
        if exc is None:
            if chain:
                break
            continue
        if chain and exc.index == chain[0].index:  # the same traceback, found from its header and its frames
            continue
        if chain:
            between = clean[exc.index + 1 : chain[0].index]
            if not any(_CHAIN_RE.match(x) for x in between):
                break
        chain.insert(0, exc)
    return chain


@dataclass(frozen=True)
class NativeCrash:
    """What the log says of a crash in native code.

    Attributes:
        error: ``Fatal Python error: Segmentation fault``, ``terminate called after throwing ...``, or None.
        frame: the innermost native frame outside the C library and the C++ runtime's abort path
            (``#3 mindspore::...``) or, from a faulthandler dump, the innermost Python frame, as text;
            None when the log has no stack.
        caller: from a faulthandler dump, the innermost frame in the user's files (``file:line (function)``).
    """

    error: Optional[str]
    frame: Optional[str]
    caller: Optional[str] = None


_FATAL_RE = re.compile(
    r"^\s*(Fatal Python error: .+|terminate called after throwing an instance of .+|terminate called without an active "
    r"exception)$"
)
_WHAT_RE = re.compile(r"^\s*what\(\):\s*(.+)$")
_CURRENT_THREAD_RE = re.compile(r"^\s*(Current thread|Thread) 0x[0-9a-fA-F]+ .*\(most recent call first\):\s*$")
_FH_FRAME_RE = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>.+?)\s*$')
_NATIVE_FRAME_RE = re.compile(r"^\s*#(?P<n>\d+)\s+(?:0x[0-9a-fA-F]+\s+in\s+)?(?P<what>.+?)\s*$")
#: Native frames of the C library and of the C++ runtime's abort path: the crash is not there.
_RUNTIME_FRAME_RE = re.compile(
    r"\b(libc|libpthread|libstdc\+\+|libgcc_s|ld-linux[\w-]*)\.so|^(__pthread_kill\w*|raise|abort|gsignal|__GI_\w+|"
    r"__cxa_\w+|__gnu_cxx::__verbose_terminate_handler|std::terminate|__restore_rt|_start|__libc_start\w*)\b"
)


def native_crash(lines: Sequence[str]) -> NativeCrash:
    """The last fatal-error line, and the crashing frame, of a process that died of a signal."""
    clean = [strip_ansi(x) for x in lines]
    error: Optional[str] = None
    at = -1
    for i, line in enumerate(clean):
        m = _FATAL_RE.match(line)
        if m:
            error, at = m.group(1).strip(), i
    if error is not None and error.startswith("terminate called after") and at + 1 < len(clean):
        w = _WHAT_RE.match(clean[at + 1])
        if w:
            error = f"{error}: {w.group(1).strip()}"
    frame: Optional[str] = None
    caller: Optional[str] = None
    for i in range(max(at, 0), len(clean)):
        if _CURRENT_THREAD_RE.match(clean[i]) and clean[i].lstrip().startswith("Current thread"):
            frames = []
            for line in clean[i + 1 :]:
                f = _FH_FRAME_RE.match(line)
                if not f:
                    break
                frames.append(PyFrame(f.group("file"), int(f.group("line")), f.group("func")))
            if frames:
                frame = str(frames[0])
                user = next((f for f in frames if is_user_file(f.file)), None)
                caller = str(user) if user is not None and user != frames[0] else None
            break
    natives: List[Tuple[int, str]] = []
    for line in clean:
        m = _NATIVE_FRAME_RE.match(line)
        if m:
            if m.group("n") == "0":
                natives = []  # a new stack: the last one counts
            natives.append((int(m.group("n")), m.group("what")))
    if natives:
        n, what = next(((n, w) for n, w in natives if not _RUNTIME_FRAME_RE.search(w)), natives[0])
        frame = f"#{n} {what[:200]}"
    return NativeCrash(error, frame, caller)
