"""The cause of an attempt's first failure: what the supervisor has about it, gathered into a
:class:`~launcher.logs.causerules.Failure` and classified (:func:`launcher.logs.causes.classify`).

Host records (the OOM killer's evidence) are read for local processes only: when a local rank
starts, :class:`HostRecorder` notes its memory cgroup (``/proc/<pid>/cgroup``) with that cgroup's
counters, and the kernel's clock; when a local rank died of SIGKILL, it reads the kernel log lines
since then (``dmesg``, else ``journalctl -k``; bounded in lines and time, absent when neither can
be read) and the counters again, of the cgroup the kernel's OOM line names for the pid (a rank may
have moved itself into another cgroup), else of the cgroup it started in.  Ranks on other hosts
(ssh, mpirun, Slurm) get no host records: an OOM kill there shows as a SIGKILL with no host
records, and its hint says to read that host's kernel log.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Dict, Mapping, Optional, Sequence, Tuple

from launcher.execution.results import ProcResult, tail_lines
from launcher.logs.hangreport import HangReport
from launcher.logs.hostmem import HostRecords, kernel_since, kill_cgroups, memory_cgroup, read_cgroup_files

if TYPE_CHECKING:  # the cause rules load when a failure is judged, not with every job
    from launcher.logs.causes import Cause

__all__ = ["CGROUP_ROOT", "KERNEL_LINES", "HostRecorder", "RootTail", "cgroup_folder", "judge_cause", "read_kernel_log"]

#: Where cgroup file systems are mounted.
CGROUP_ROOT = "/sys/fs/cgroup"
#: Kernel log lines read at most (the newest).
KERNEL_LINES = 4000
#: Seconds a kernel log reader may take.
_KERNEL_TIMEOUT = 5.0
#: Seconds of kernel log read before a process's start (the kernel's clock and ours differ a little).
_KERNEL_SLACK = 2.0
#: Bytes of a failed process's log read for its cause.
TAIL_BYTES = 256 * 1024


def cgroup_folder(memcg: str, root: str = CGROUP_ROOT) -> str:
    """The folder of a memory cgroup the kernel names (``task_memcg=/job``): under ``<root>/memory``
    when a cgroup v1 memory hierarchy is mounted there, else under ``root`` (v2)."""
    v1 = os.path.join(root, "memory")
    base = v1 if os.path.isdir(v1) else root
    return os.path.normpath(os.path.join(base, memcg.strip().lstrip("/")))


def read_kernel_log(since: float, limit: int = KERNEL_LINES) -> Tuple[str, ...]:
    """The kernel log lines stamped ``since`` (seconds on the kernel's clock) or later, of the newest
    ``limit``: ``dmesg``, else ``journalctl -k -o short-monotonic``; empty when neither answers."""
    for argv in (["dmesg"], ["journalctl", "-k", "-q", "--no-pager", "-o", "short-monotonic", "-n", str(limit)]):
        try:
            done = subprocess.run(
                argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=_KERNEL_TIMEOUT, check=False
            )
        except (OSError, subprocess.SubprocessError):
            continue
        if done.returncode != 0 or not done.stdout:
            continue
        lines = done.stdout.decode("utf-8", "replace").splitlines()[-limit:]
        return tuple(kernel_since(lines, since))
    return ()


def _kernel_clock() -> float:
    """Seconds on the clock of the kernel log's stamps (printk's: monotonic, from boot)."""
    return time.monotonic()


@dataclass(frozen=True)
class _Started:
    """A local process at its start: the kernel's clock, its memory cgroup folder and its counters."""

    clock: float
    folder: Optional[str] = None
    files: Mapping[str, str] = field(default_factory=dict)


class HostRecorder:
    """The host records of an attempt's local processes (see the module doc).

    Args:
        root: where cgroup file systems are mounted.
        kernel_log: reads the kernel log lines since a clock value (:func:`read_kernel_log`).
        clock: the kernel log's clock.
    """

    def __init__(
        self,
        root: str = CGROUP_ROOT,
        kernel_log: Callable[[float], Sequence[str]] = read_kernel_log,
        clock: Callable[[], float] = _kernel_clock,
    ) -> None:
        self.root = root
        self.kernel_log = kernel_log
        self.clock = clock
        self._started: Dict[int, _Started] = {}

    def started(self, pid: Optional[int], local: bool) -> None:
        """A process started: note its cgroup and counters when it is local (never raises)."""
        if pid is None or not local:
            return
        folder = None
        try:
            with open(f"/proc/{pid}/cgroup", errors="replace") as fh:
                folder = memory_cgroup(fh.read(), self.root)
        except (OSError, ValueError):
            pass  # it exited already (or /proc is not Linux's)
        self._started[pid] = _Started(self.clock(), folder, read_cgroup_files(folder) if folder else {})

    def records(self, pid: Optional[int], returncode: Optional[int]) -> HostRecords:
        """The records about a local process that died of SIGKILL (empty for others)."""
        from launcher.logs.causerules import signal_of

        start = self._started.get(pid) if pid is not None else None
        if pid is None or start is None or signal_of(returncode) != signal.SIGKILL:
            return HostRecords()
        kernel = self.kernel_log(start.clock - _KERNEL_SLACK)
        memcg = kill_cgroups(kernel).get(pid)
        folder = cgroup_folder(memcg, self.root) if memcg is not None else start.folder
        after = read_cgroup_files(folder) if folder else {}
        before = start.files if folder == start.folder else {}
        return HostRecords(kernel=tuple(kernel), cgroup=after, cgroup_before=before)


@dataclass(frozen=True)
class RootTail:
    """A failed process's log tail as read once: all of it for the classifier, the end for the root cause."""

    lines: Tuple[str, ...]

    @classmethod
    def read(cls, path: str) -> "RootTail":
        """The last :data:`~launcher.logs.causerules.TAIL_LINES` lines of ``path`` (of its last :data:`TAIL_BYTES`)."""
        from launcher.logs.causerules import TAIL_LINES

        return cls(tail_lines(path, TAIL_LINES, max_bytes=TAIL_BYTES))

    def shown(self, n: int = 20) -> Tuple[str, ...]:
        """The last ``n`` lines: the root cause's tail."""
        return self.lines[-n:]


def judge_cause(
    failed: ProcResult,
    tail: Sequence[str],
    scheduler_tail: Sequence[str] = (),
    scheduler_host: Optional[str] = None,
    records: Optional[HostRecords] = None,
    hang: Optional[HangReport] = None,
) -> Optional[Cause]:
    """The cause of ``failed`` (:func:`launcher.logs.causes.classify`) from its log tail, the
    scheduler's log tail, its host's records, the attempt's hang report and whether its host was
    lost; None only if classifying failed (a judged attempt must not become a crash)."""
    from launcher.logs.causerules import Failure

    failure = Failure(
        name=failed.name,
        host=failed.host,
        returncode=failed.returncode,
        tail=tuple(tail),
        log=failed.log,
        scheduler_tail=tuple(scheduler_tail),
        scheduler_host=scheduler_host,
        records=records or HostRecords(),
        pids=(failed.pid,) if failed.pid is not None else (),
        hang=hang.to_json() if hang is not None else None,
        lost=failed.lost,
    )
    from launcher.logs.causes import classify

    try:
        return classify(failure)
    except Exception:  # the classifier is pure and tested; a miss there still leaves the root cause
        return None
