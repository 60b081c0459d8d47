"""Out of memory, from the host's records: a SIGKILL its kernel's OOM killer or the cgroup's
``oom_kill`` count owns.
"""

from __future__ import annotations

import signal as _signal
from typing import Optional

from launcher.logs.causerules import Facts, Found, cut
from launcher.logs.hostmem import cgroup_memory, format_bytes, kernel_kills, oom_kill_count


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
        parts.append(
            f"the cgroup's oom_kill count went from {before} to {after}"
            if before is not None
            else f"the cgroup's oom_kill count is {after}"
        )
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
