"""The cores a process may use on this host: its CPU affinity (the cpuset) and the cgroup CPU quota.

``read_host_cores()`` returns one JSON-ready object::

    {"cpus": [0, 1], "quota": 0.5, "quota_source": "cgroup v1 cpu.cfs_quota_us /mslaunch",
     "set": {"OMP_NUM_THREADS": "4"}}

``cpus``: ``sched_getaffinity(0)`` (every core where there is none); ``quota``: the tightest CPU
quota in cores of this process's cgroup and its ancestors (cgroup v2 ``cpu.max``, v1
``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``), None when there is none; ``set``: the thread
variables already in this environment (a user's own value wins). The planner
(:mod:`launcher.planning.cpu.hostcores`) turns that into usable cores.

Runs here (the CLI), inside the ssh agent on every host (sent as source with
:mod:`launcher.execution.ssh.remote_agent`), and in the Slurm shim: standard library only,
Python >= 3.6, no imports from ``launcher``.
"""

import os

#: thread variables a user may have set in the environment ranks start from (theirs win)
THREAD_VARS = ("OMP_NUM_THREADS", "MSLAUNCH_CPU_THREADS")


def _cores_affinity():
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:
        return list(range(os.cpu_count() or 1))


def _cores_read(path):
    try:
        with open(path, encoding="ascii", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return None


def _cgroup_mounts(mountinfo):
    """cgroup mounts from ``/proc/self/mountinfo``: [(version, controllers, root, mount point)]."""
    out = []  # type: list[tuple[int, set[str], str, str]]
    for line in (mountinfo or "").splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        if tail[0] == "cgroup2":
            out.append((2, set(), fields[3], fields[4]))
        elif tail[0] == "cgroup":
            out.append((1, set(tail[2].split(",")), fields[3], fields[4]))
    return out


def _cgroup_paths(cgroup_text):
    """``/proc/self/cgroup``: {controller: path} (v1), and ``""``: path (v2)."""
    out = {}
    for line in (cgroup_text or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":
            out[""] = path
        for c in controllers.split(","):
            if c:
                out[c] = path
    return out


def _cgroup_ancestors(mount, root, path):
    """The directories of ``path``'s cgroup and of its ancestors under the mount, deepest first."""
    rel = path
    if root not in ("/", "") and (path == root or path.startswith(root.rstrip("/") + "/")):
        rel = path[len(root.rstrip("/")) :]
    rel = rel.strip("/")
    parts = rel.split("/") if rel else []
    return [(os.path.join(mount, *parts[:i]), "/" + "/".join(parts[:i])) for i in range(len(parts), -1, -1)]


def _cgroup_v2_quota(directory):
    text = _cores_read(os.path.join(directory, "cpu.max"))
    if not text:
        return None
    quota, _, period = text.partition(" ")
    if quota == "max":
        return None
    try:
        q, p = int(quota), int(period or "100000")
    except ValueError:
        return None
    return q / p if q > 0 and p > 0 else None


def _cgroup_v1_quota(directory):
    q = _cores_read(os.path.join(directory, "cpu.cfs_quota_us"))
    p = _cores_read(os.path.join(directory, "cpu.cfs_period_us"))
    try:
        quota, period = int(q or "-1"), int(p or "0")
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def cgroup_quota(mountinfo, cgroup_text):
    """The tightest CPU quota (cores, source) of the cgroup named in ``cgroup_text`` and its
    ancestors, reading the files under the mounts in ``mountinfo``; (None, None) without one."""
    paths = _cgroup_paths(cgroup_text)
    best = (None, None)  # type: tuple[float | None, str | None]
    for version, controllers, root, mount in _cgroup_mounts(mountinfo):
        if version == 1 and "cpu" not in controllers:
            continue
        path = paths.get("cpu" if version == 1 else "")
        if path is None:
            continue
        read = _cgroup_v1_quota if version == 1 else _cgroup_v2_quota
        name = "cgroup v1 cpu.cfs_quota_us" if version == 1 else "cgroup v2 cpu.max"
        for directory, shown in _cgroup_ancestors(mount, root, path):
            quota = read(directory)
            if quota is not None and (best[0] is None or quota < best[0]):
                best = (round(quota, 3), "%s %s" % (name, shown))
    return best


def read_host_cores():
    """This process's cores (see the module docstring)."""
    quota, source = cgroup_quota(_cores_read("/proc/self/mountinfo"), _cores_read("/proc/self/cgroup"))
    preset = {k: os.environ[k] for k in THREAD_VARS if k in os.environ}
    return {"cpus": _cores_affinity(), "quota": quota, "quota_source": source, "set": preset}


if __name__ == "__main__":
    import json

    print(json.dumps(read_host_cores()))
