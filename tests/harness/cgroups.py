"""Real CPU limits for a process and everything it starts later: a cgroup v1 cpuset and CPU quota.

``cpu_limit(pid, cpus="0", quota=0.5)`` creates ``/sys/fs/cgroup/cpuset/<name>`` (``cpuset.cpus``)
and ``/sys/fs/cgroup/cpu/<name>`` (``cpu.cfs_quota_us`` = quota x ``cpu.cfs_period_us``), moves
``pid`` into both and, on exit, moves every process still in them back to the root cgroups and
removes them.  Used on a namespace host's sshd (:mod:`tests.harness.netns_cluster`): every session
it opens afterwards, and so the mslaunch agent and its ranks, runs under those limits.

Needs root and cgroup v1's ``cpu`` and ``cpuset`` controllers mounted under ``/sys/fs/cgroup``
(:func:`unavailable_reason` says why not).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from typing import Iterator, List, Optional

ROOT = "/sys/fs/cgroup"


def unavailable_reason() -> Optional[str]:
    """Why :func:`cpu_limit` cannot run here, or None."""
    if os.geteuid() != 0:
        return "cgroup limits need root"
    for ctl, name in (("cpu", "cpu.cfs_quota_us"), ("cpuset", "cpuset.cpus")):
        if not os.path.exists(os.path.join(ROOT, ctl, name)):
            return f"cgroup v1 '{ctl}' controller not mounted at {ROOT}/{ctl}"
    return None


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="ascii") as f:
        f.write(text)


def _procs(directory: str) -> List[int]:
    try:
        with open(os.path.join(directory, "cgroup.procs"), encoding="ascii") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


@contextlib.contextmanager
def cpu_limit(pid: int, cpus: Optional[str] = None, quota: Optional[float] = None) -> Iterator[str]:
    """Run ``pid`` (and what it starts from now on) on ``cpus`` (a cpuset list, e.g. ``"0"``)
    with a CPU quota of ``quota`` cores; yields the cgroups' name."""
    name = f"mslaunch-test-{uuid.uuid4().hex[:8]}"
    made: List[str] = []
    try:
        if cpus is not None:
            d = os.path.join(ROOT, "cpuset", name)
            os.mkdir(d)
            made.append(d)
            _write(os.path.join(d, "cpuset.cpus"), cpus)
            with open(os.path.join(ROOT, "cpuset", "cpuset.mems"), encoding="ascii") as f:
                _write(os.path.join(d, "cpuset.mems"), f.read().strip())
            _write(os.path.join(d, "cgroup.procs"), str(pid))
        if quota is not None:
            d = os.path.join(ROOT, "cpu", name)
            os.mkdir(d)
            made.append(d)
            with open(os.path.join(d, "cpu.cfs_period_us"), encoding="ascii") as f:
                period = int(f.read())
            _write(os.path.join(d, "cpu.cfs_quota_us"), str(int(quota * period)))
            _write(os.path.join(d, "cgroup.procs"), str(pid))
        yield name
    finally:
        for d in reversed(made):
            root = os.path.dirname(d)
            for p in _procs(d):
                with contextlib.suppress(OSError):  # it may have exited meanwhile
                    _write(os.path.join(root, "cgroup.procs"), str(p))
            os.rmdir(d)
