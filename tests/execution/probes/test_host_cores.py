"""The cores reader that runs on every host (launcher/execution/probes/host_cores.py): the cgroup
quota from real files laid out as cgroup v1 and v2 mount them, and this process's own cores."""

from __future__ import annotations

import os
import subprocess
import sys

from launcher.execution.probes.host_cores import cgroup_quota, read_host_cores


def _mountinfo(*mounts: str) -> str:
    return "\n".join(mounts) + "\n"


V1 = "35 25 0:31 / {mnt}/cpu rw,relatime shared:10 - cgroup cgroup rw,cpu,cpuacct"
V2 = "29 23 0:26 / {mnt} rw,nosuid shared:4 - cgroup2 cgroup2 rw"


def test_v1_quota_is_quota_over_period_and_the_tightest_ancestor_wins(tmp_path):
    root = tmp_path / "cpu"
    (root / "job" / "step").mkdir(parents=True)
    for d, q in ((root, "-1"), (root / "job", "150000"), (root / "job" / "step", "-1")):
        (d / "cpu.cfs_quota_us").write_text(q + "\n")
        (d / "cpu.cfs_period_us").write_text("100000\n")
    info = _mountinfo(V1.format(mnt=tmp_path))
    assert cgroup_quota(info, "4:cpu,cpuacct:/job/step\n") == (1.5, "cgroup v1 cpu.cfs_quota_us /job")
    assert cgroup_quota(info, "4:cpu,cpuacct:/\n") == (None, None)


def test_v2_cpu_max_half_a_core_and_max_means_none(tmp_path):
    (tmp_path / "pod").mkdir()
    (tmp_path / "cpu.max").write_text("max 100000\n")
    (tmp_path / "pod" / "cpu.max").write_text("50000 100000\n")
    info = _mountinfo(V2.format(mnt=tmp_path))
    assert cgroup_quota(info, "0::/pod\n") == (0.5, "cgroup v2 cpu.max /pod")
    (tmp_path / "pod" / "cpu.max").write_text("max 100000\n")
    assert cgroup_quota(info, "0::/pod\n") == (None, None)


def test_a_cgroup_namespace_root_is_taken_off_the_path(tmp_path):
    """In a container the mount's root is the container's cgroup: /proc/self/cgroup names paths below it."""
    (tmp_path / "cpu.max").write_text("200000 100000\n")
    info = _mountinfo("29 23 0:26 /kubepods/pod1 %s rw - cgroup2 cgroup2 rw" % tmp_path)
    assert cgroup_quota(info, "0::/kubepods/pod1\n") == (2.0, "cgroup v2 cpu.max /")


def test_no_cgroup_mounts_or_files_is_no_quota():
    assert cgroup_quota("", "") == (None, None)
    assert cgroup_quota(None, None) == (None, None)


def test_this_process_reports_its_affinity_and_the_thread_variables_it_inherited():
    got = read_host_cores()
    assert got["cpus"] == sorted(os.sched_getaffinity(0))
    out = subprocess.run(
        [sys.executable, "-S", "-c", open(sys.modules[read_host_cores.__module__].__file__).read()],
        env={"OMP_NUM_THREADS": "3", "PATH": os.environ.get("PATH", "")},
        capture_output=True,
        text=True,
        check=True,
    )
    import json

    child = json.loads(out.stdout)
    assert child["set"] == {"OMP_NUM_THREADS": "3"} and child["cpus"] == got["cpus"]
