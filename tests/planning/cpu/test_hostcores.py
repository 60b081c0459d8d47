"""The pure thread rule for a host's ranks (launcher/planning/cpu/hostcores.py)."""

from __future__ import annotations

import pytest

from launcher.planning.cpu.hostcores import (
    HostCores,
    HostCoresError,
    HostThreads,
    host_thread_env,
    parse_host_cores,
    thread_shares,
)


def test_shares_follow_torchrun_and_deepspeed_at_least_one():
    assert thread_shares(8, 3) == (3, 3, 2)
    assert thread_shares(2, 2) == (1, 1)
    assert thread_shares(1, 4) == (1, 1, 1, 1)
    assert thread_shares(4, 0) == ()


@pytest.mark.parametrize(
    "cpus,quota,usable",
    [((0, 1), None, 2), ((0,), 0.5, 1), ((0, 1, 2, 3), 1.5, 1), ((0, 1), 8.0, 2), ((0, 1, 2, 3), 2.0, 2)],
)
def test_usable_is_the_cpuset_capped_by_the_quota_rounded_down_at_least_one(cpus, quota, usable):
    assert HostCores("h", cpus, quota).usable == usable


def test_a_host_plan_says_where_its_numbers_came_from_and_warns_when_oversubscribed():
    cores = parse_host_cores(
        {"cpus": [0], "quota": 0.5, "quota_source": "cgroup v1 cpu.cfs_quota_us /job"}, "h1", "the ssh agent on h1"
    )
    p = host_thread_env(HostThreads("h1", (0, 1)), cores)
    assert p.env == {
        0: {"OMP_NUM_THREADS": "1", "MSLAUNCH_CPU_THREADS": "1"},
        1: {"OMP_NUM_THREADS": "1", "MSLAUNCH_CPU_THREADS": "1"},
    }
    assert p.notes == (
        "h1: threads per rank 1 (OMP_NUM_THREADS, MSLAUNCH_CPU_THREADS): 2 rank(s) on 1 usable core(s) "
        "(cpuset 0, cgroup v1 cpu.cfs_quota_us /job: 0.5 core(s); read by the ssh agent on h1)",
    )
    assert len(p.warnings) == 1 and "h1: 2 ranks on 1 usable core(s)" in p.warnings[0]


def test_a_value_set_on_the_host_or_by_the_user_wins():
    cores = parse_host_cores(
        {"cpus": [0, 1, 2, 3], "set": {"OMP_NUM_THREADS": "8", "PATH": "/x"}}, "h2", "the ssh agent on h2"
    )
    assert dict(cores.preset) == {"OMP_NUM_THREADS": "8"}
    p = host_thread_env(HostThreads("h2", (5, 6)), cores)
    assert p.env == {5: {"MSLAUNCH_CPU_THREADS": "2"}, 6: {"MSLAUNCH_CPU_THREADS": "2"}}
    assert any("2 ranks x OMP_NUM_THREADS=8 (yours) exceed its 4 usable core(s)" in w for w in p.warnings)
    p = host_thread_env(HostThreads("h2", (5,), set_vars=()), HostCores("h2", (0, 1)))
    assert p.env == {5: {}} and "yours: nothing set" in p.notes[0]


@pytest.mark.parametrize(
    "data,field",
    [
        ({"cpus": []}, "cpus"),
        ({"cpus": [0, "1"]}, "cpus"),
        ({"cpus": [0], "quota": 0}, "quota"),
        ({"cpus": [0], "quota": True}, "quota"),
    ],
)
def test_a_bad_report_names_the_host_and_the_field(data, field):
    with pytest.raises(HostCoresError) as e:
        parse_host_cores(data, "h3", "x")
    assert e.value.path == "h3" and e.value.field == field
    with pytest.raises(HostCoresError):
        parse_host_cores(["not", "an", "object"], "h3", "x")


def test_cpus_per_task_caps_each_ranks_share_of_the_host():
    cores = HostCores("n1", tuple(range(8)), learned="the Slurm task shim on n1")
    p = host_thread_env(HostThreads("n1", (0, 1)), cores, per_rank=2, per_rank_source="SLURM_CPUS_PER_TASK=2")
    assert [p.env[r]["OMP_NUM_THREADS"] for r in (0, 1)] == ["2", "2"]
    assert p.notes[0].endswith("; at most 2 per rank (SLURM_CPUS_PER_TASK=2)") and p.warnings == ()
    tight = HostCores("n1", (0, 1, 2), quota=2.5)  # 2 usable: the cpuset and quota win over the request
    p = host_thread_env(HostThreads("n1", (0, 1, 2)), tight, per_rank=4)
    assert [p.env[r]["OMP_NUM_THREADS"] for r in (0, 1, 2)] == ["1", "1", "1"] and len(p.warnings) == 1
