"""Threads per rank across hosts in the plan (launcher/planning/job/procenv.py): local ranks from this
machine's usable cores, remote ranks set at start where the launcher reaches their host."""

from __future__ import annotations

from launcher.planning.backends.mpirun import mpirun_command
from launcher.planning.build import build_plan
from launcher.planning.cpu.hostcores import HostThreads
from launcher.planning.cpu.tuning import CpuSpec
from launcher.planning.inventory.hostarg import parse_host_list
from launcher.planning.job.mpirun_options import MpiOptions
from launcher.planning.job.spec import JobSpec


def job(hosts="localhost:2,h2:2,h3:1", **kw):
    base = dict(
        inventory=parse_host_list(hosts),
        program=("train.py",),
        python="/usr/bin/python3",
        cwd="/w",
        job_dir="/w/logs/j",
        job_id="j",
        launcher="ssh",
        cpu=CpuSpec(mode="auto", mindspore_cpu=True, local_cpus=(0, 1), remote_tune=True),
    )
    base.update(kw)
    return JobSpec(**base)


def test_remote_ranks_are_left_to_the_start_and_the_plan_says_so():
    plan = build_plan(job())
    assert plan.host_threads == (HostThreads("h2", (2, 3)), HostThreads("h3", (4,)))
    for r in plan.ranks[2:]:
        assert "OMP_NUM_THREADS" not in r.env_dict() and "MSLAUNCH_CPU_THREADS" not in r.env_dict()
    assert plan.ranks[0].env_dict()["OMP_NUM_THREADS"] == "1"
    assert (
        "h2: threads per rank set at start by the ssh agent from the host's usable cores (cpuset, cgroup CPU quota) / "
        "2 rank(s) "
        "(not reached before this plan)"
    ) in plan.cpu_notes
    assert plan.thread_source(plan.ranks[4]).startswith("h3: threads per rank set at start")
    assert (
        "2 local rank(s) on 2 usable core(s) (cpuset 0-1, no cgroup CPU quota; read by this machine)"
        in plan.thread_source(plan.ranks[0])
    )
    assert plan.to_json()["cpu"]["threads_at_start"][0] == {
        "host": "h2",
        "ranks": [2, 3],
        "set": ["OMP_NUM_THREADS", "MSLAUNCH_CPU_THREADS"],
        "at": "start",
    }


def test_a_users_thread_variable_for_a_host_is_not_set_at_start():
    plan = build_plan(job(env=(("OMP_NUM_THREADS", "4"),)))
    assert plan.host_threads[0].set_vars == ("MSLAUNCH_CPU_THREADS",) and plan.host_threads[0].user_omp == "4"


def test_mpirun_and_slurm_set_remote_threads_at_start_too():
    plan = build_plan(job(launcher="mpirun", wrapper="/t/mslaunch-rank.sh"))
    assert plan.host_threads == (HostThreads("h2", (2, 3)), HostThreads("h3", (4,)))
    assert not any(n.startswith("remote hosts: threads not planned") for n in plan.cpu_notes)
    assert any(
        n.startswith("h2: threads per rank set at start by the rank wrapper (mslaunch-rank.sh) on each host")
        for n in plan.cpu_notes
    )
    contexts = " ".join(mpirun_command(plan)).split(" : ")
    h2 = next(c for c in contexts if "--host h2:" in c)
    assert "-x MSLAUNCH_THREADS=OMP_NUM_THREADS,MSLAUNCH_CPU_THREADS" in h2 and "-x MSLAUNCH_HOST=h2" in h2
    local = [c for c in contexts if "--host localhost:" in c]
    assert len(local) == 2 and not any(
        "MSLAUNCH_THREADS=" in c for c in local
    )  # planned here, from this machine's cores
    plan = build_plan(
        job(
            launcher="mpirun",
            wrapper="/t/mslaunch-rank.sh",
            env=(("OMP_NUM_THREADS", "3"), ("MSLAUNCH_CPU_THREADS", "2")),
        )
    )
    assert not any(a.startswith("MSLAUNCH_THREADS=") for a in mpirun_command(plan))
    assert "MSLAUNCH_V_MSLAUNCH_CPU_THREADS" in mpirun_command(plan)  # the user's own, carried


def test_a_users_mpirun_binding_is_left_alone():
    plan = build_plan(job(launcher="mpirun", wrapper="/t/w.sh", mpi=MpiOptions(extra=("--map-by", "ppr:1:core:PE=2"))))
    argv = list(mpirun_command(plan))
    assert "--bind-to" not in argv and argv[argv.index("--map-by") + 1] == "ppr:1:core:PE=2"


def test_a_local_cgroup_quota_caps_the_local_threads_and_warns():
    spec = CpuSpec(
        mode="auto", mindspore_cpu=True, local_cpus=(0, 1), local_quota=0.5, local_quota_source="cgroup v2 cpu.max /pod"
    )
    plan = build_plan(job(hosts="localhost:2", launcher="local", cpu=spec))
    assert [r.env_dict()["OMP_NUM_THREADS"] for r in plan.ranks] == ["1", "1"]
    assert (
        "2 ranks on 1 usable core(s): several ranks share each core (oversubscribed; expect each rank to run slower)"
        in plan.cpu_warnings
    )
    assert any("(cpuset 0-1, cgroup v2 cpu.max /pod: 0.5 core(s); read by this machine)" in n for n in plan.cpu_notes)
    spec = CpuSpec(mode="auto", mindspore_cpu=True, local_cpus=(0, 1, 2, 3, 4, 5, 6, 7), local_quota=4.0)
    plan = build_plan(job(hosts="localhost:2", launcher="local", cpu=spec))
    assert [r.env_dict()["OMP_NUM_THREADS"] for r in plan.ranks] == ["2", "2"] and plan.cpu_warnings == ()
