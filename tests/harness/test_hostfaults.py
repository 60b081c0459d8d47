"""The CPU weight the longest end-to-end tests take (tests/harness/hostfaults.py): a child
started with :func:`favored_children`'s ``preexec_fn`` runs in a cgroup v1 ``cpu`` group of
weight ``FAVORED_SHARES`` (and so does all it starts); the group is gone afterwards."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.harness.hostfaults import CPU_ROOT, FAVORED_SHARES, cgroup_v1_cpu, favored_children


@pytest.mark.needs("root")
def test_a_favored_child_and_what_it_starts_run_in_a_weighted_group_removed_afterwards():
    if not cgroup_v1_cpu():
        pytest.skip("needs the cgroup v1 cpu controller (/sys/fs/cgroup/cpu/cpu.cfs_quota_us)")
    with favored_children() as favored:
        groups = subprocess.run(
            ["/bin/sh", "-c", "cat /proc/self/cgroup; cat /proc/$$/cgroup"],
            preexec_fn=favored, capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        cpu = [line.split(":", 2)[2] for line in groups.splitlines() if line.split(":", 2)[1] == "cpu"]
        assert len(cpu) == 2 and len(set(cpu)) == 1 and cpu[0].startswith("/mslaunch-tests-favored-"), groups
        path = CPU_ROOT + cpu[0]
        with open(os.path.join(path, "cpu.shares")) as fh:
            assert int(fh.read()) == FAVORED_SHARES
    assert not os.path.exists(path)


@pytest.mark.needs("root")
def test_with_this_thread_the_caller_is_in_the_group_until_the_way_out_and_back_where_it_was():
    if not cgroup_v1_cpu():
        pytest.skip("needs the cgroup v1 cpu controller (/sys/fs/cgroup/cpu/cpu.cfs_quota_us)")

    def mine():
        with open("/proc/thread-self/cgroup") as fh:
            return next(line.rstrip("\n").split(":", 2)[2] for line in fh if line.split(":", 2)[1] == "cpu")

    before = mine()
    with favored_children(this_thread=True):
        inside = mine()
        assert inside.startswith("/mslaunch-tests-favored-") and inside != before
        with open(os.path.join(CPU_ROOT + inside, "cpu.shares")) as fh:
            assert int(fh.read()) == FAVORED_SHARES
    assert mine() == before and not os.path.exists(CPU_ROOT + inside)
    with favored_children():  # without it, the caller stays where it was
        assert mine() == before
