"""A host's memory records about a killed process: the kernel's OOM-killer lines and the cgroup's
counters (parsing is pure; :func:`read_cgroup_files` is the thin reader of one cgroup folder).

What the kernel logs when its OOM killer ends a process (``dmesg``, ``journalctl -k``; measured on
kernel 6.18 with a cgroup v1 memory limit, tests/logs/data/causes/oom_cgroup_v1/kernel.log)::

    python3 invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0
    memory: usage 65536kB, limit 65536kB, failcnt 88
    oom-kill:constraint=CONSTRAINT_MEMCG,...,task_memcg=/job,task=python3,pid=8132,uid=0
    Memory cgroup out of memory: Killed process 8132 (python3) total-vm:82116kB, anon-rss:65280kB, ...

(a host-wide OOM says ``Out of memory: Killed process N (name)``; kernels before 4.x said ``Kill
process N (name) score S or sacrifice child`` then ``Killed process N (name)``).

The cgroup's counters, by the files of its folder:

* v1 (``/sys/fs/cgroup/memory/<group>/``): ``memory.oom_control`` (``oom_kill N`` since kernel 4.13),
  ``memory.max_usage_in_bytes`` (peak), ``memory.limit_in_bytes`` (9223372036854771712: no limit);
* v2 (``/sys/fs/cgroup/<group>/``): ``memory.events`` (``oom_kill N``), ``memory.peak``, ``memory.max``
  (``max``: no limit).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

__all__ = [
    "CGROUP_FILES",
    "HostRecords",
    "KernelKill",
    "cgroup_memory",
    "format_bytes",
    "kernel_kills",
    "kernel_since",
    "kill_cgroups",
    "memory_cgroup",
    "oom_kill_count",
    "read_cgroup_files",
]

#: The files of a cgroup folder that tell about memory and the OOM killer (v1 and v2).
CGROUP_FILES = (
    "memory.events",
    "memory.oom_control",
    "memory.peak",
    "memory.max",
    "memory.max_usage_in_bytes",
    "memory.limit_in_bytes",
)

#: cgroup v1's "no limit" (PAGE_COUNTER_MAX pages of 4 KiB); anything this large is no limit.
_NO_LIMIT = 1 << 62

_KILLED_RE = re.compile(
    r"(?P<scope>Memory cgroup out of memory|Out of memory(?: \(oom_kill_allocating_task\))?)?:?\s*"
    r"Kill(?:ed)? process (?P<pid>\d+) \((?P<name>[^)]*)\)"
)
_OOM_KILL_RE = re.compile(r"oom-kill:.*?\btask=(?P<name>[^,\s]+),pid=(?P<pid>\d+)")
_USAGE_RE = re.compile(r"\bmemory: usage (?P<usage>\d+)kB, limit (?P<limit>\d+)kB")
_ANON_RE = re.compile(r"anon-rss:\d+kB")
_COUNT_RE = re.compile(r"^\s*oom_kill\s+(\d+)\s*$", re.MULTILINE)
_DMESG_PREFIX_RE = re.compile(r"^\s*\[\s*\d+\.\d+\]\s*")
_DMESG_TIME_RE = re.compile(r"^\s*\[\s*(\d+\.\d+)\]")
_MEMCG_RE = re.compile(r"oom-kill:.*?\btask_memcg=(?P<memcg>[^,\s]+),task=[^,\s]+,pid=(?P<pid>\d+)")


@dataclass(frozen=True)
class HostRecords:
    """A host's records about the time a process ran, as the caller gathered them (none is required).

    Attributes:
        kernel: kernel log lines from the process's start on (``dmesg`` / ``journalctl -k``).
        cgroup: the process's memory cgroup files read after it ended: file name -> contents
            (:data:`CGROUP_FILES`, e.g. from :func:`read_cgroup_files`).
        cgroup_before: the same files read when the process started (the ``oom_kill`` count then);
            empty when not read.
    """

    kernel: Tuple[str, ...] = ()
    cgroup: Mapping[str, str] = field(default_factory=dict)
    cgroup_before: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class KernelKill:
    """One process the kernel's OOM killer ended: its pid and name, the line that says so, and the
    cgroup's usage and limit (bytes) the kernel printed before it (None when it printed none)."""

    pid: int
    name: str
    line: str
    usage: Optional[int] = None
    limit: Optional[int] = None

    @property
    def summary(self) -> str:
        """The kill line up to the process's name, with its anonymous RSS when the line gives it
        (``Memory cgroup out of memory: Killed process 8132 (python3), anon-rss:65280kB``)."""
        m = _KILLED_RE.search(self.line) or _OOM_KILL_RE.search(self.line)
        head = self.line[: m.end()] if m else self.line
        rss = _ANON_RE.search(self.line)
        return head + (f", {rss.group(0)}" if rss and rss.start() >= len(head) else "")


def kernel_kills(lines: Sequence[str]) -> List[KernelKill]:
    """The OOM killer's kills in kernel log lines, in order (one per pid and report)."""
    out: List[KernelKill] = []
    usage: Optional[Tuple[int, int]] = None
    for raw in lines:
        line = _DMESG_PREFIX_RE.sub("", raw.rstrip())
        u = _USAGE_RE.search(line)
        if u:
            usage = (int(u.group("usage")) * 1024, int(u.group("limit")) * 1024)
            continue
        m = _KILLED_RE.search(line)
        if m and (m.group("scope") or "Killed process" in line):
            pid = int(m.group("pid"))
            if out and out[-1].pid == pid and "oom-kill:" in out[-1].line:
                out[-1] = KernelKill(
                    pid, m.group("name"), line, out[-1].usage, out[-1].limit
                )  # the kill line says more
            elif not out or out[-1].pid != pid:
                out.append(KernelKill(pid, m.group("name"), line, *(usage or (None, None))))
            continue
        k = _OOM_KILL_RE.search(line)
        if k:
            out.append(KernelKill(int(k.group("pid")), k.group("name"), line, *(usage or (None, None))))
    return out


def kill_cgroups(lines: Sequence[str]) -> Dict[int, str]:
    """pid -> the memory cgroup the OOM killer named for it (``oom-kill:...,task_memcg=/job,task=python3,pid=8132``),
    the path inside the memory hierarchy; a later line for a pid wins."""
    out: Dict[int, str] = {}
    for line in lines:
        m = _MEMCG_RE.search(line)
        if m:
            out[int(m.group("pid"))] = m.group("memcg")
    return out


def kernel_since(lines: Sequence[str], since: float) -> List[str]:
    """The ``dmesg`` lines stamped ``since`` (seconds since boot, the kernel's clock) or later; lines
    without a stamp follow the stamped line before them (all of them when none is stamped)."""
    out: List[str] = []
    keep = True
    for line in lines:
        m = _DMESG_TIME_RE.match(line)
        if m:
            keep = float(m.group(1)) >= since
        if keep:
            out.append(line)
    return out


def memory_cgroup(proc_cgroup: str, root: str = "/sys/fs/cgroup") -> Optional[str]:
    """The folder of the memory cgroup that ``/proc/<pid>/cgroup``'s text names: cgroup v1's
    ``N:memory:/path`` under ``<root>/memory``, else v2's ``0::/path`` under ``root``; None when neither."""
    v2: Optional[str] = None
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if "memory" in controllers.split(","):
            return _join(os.path.join(root, "memory"), path)
        if controllers == "" and parts[0] == "0":
            v2 = _join(root, path)
    return v2


def _join(root: str, path: str) -> str:
    return os.path.normpath(os.path.join(root, path.strip().lstrip("/")))


def oom_kill_count(files: Mapping[str, str]) -> Optional[int]:
    """The cgroup's ``oom_kill`` count (``memory.events``, else ``memory.oom_control``), or None."""
    for name in ("memory.events", "memory.oom_control"):
        m = _COUNT_RE.search(files.get(name) or "")
        if m:
            return int(m.group(1))
    return None


def _number(text: Optional[str]) -> Optional[int]:
    word = (text or "").strip()
    if not word.isdigit():
        return None  # absent, or "max" (v2: no limit)
    value = int(word)
    return None if value >= _NO_LIMIT else value


def cgroup_memory(files: Mapping[str, str]) -> Tuple[Optional[int], Optional[int]]:
    """The cgroup's peak memory use and its limit in bytes (v2 files first, then v1); None where unknown
    or unlimited."""
    peak = _number(files.get("memory.peak"))
    if peak is None:
        peak = _number(files.get("memory.max_usage_in_bytes"))
    limit = _number(files.get("memory.max"))
    if limit is None:
        limit = _number(files.get("memory.limit_in_bytes"))
    return peak, limit


def format_bytes(n: int) -> str:
    """``64.0 MiB``, ``1.9 GiB``, ``512 B``."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover - the loop always returns


def read_cgroup_files(folder: str) -> Dict[str, str]:
    """The :data:`CGROUP_FILES` of a cgroup folder that can be read (file name -> contents)."""
    out: Dict[str, str] = {}
    for name in CGROUP_FILES:
        try:
            with open(os.path.join(folder, name), errors="replace") as fh:
                out[name] = fh.read()
        except OSError:
            continue
    return out
