"""Slurm allocations as inventories and the srun argv (pure; table-driven)."""

from __future__ import annotations

import pytest

from launcher.errors import InventoryError, PlanError
from launcher.planning.backends.slurm import (
    Allocation,
    allocation_inventory,
    in_allocation,
    node_lost,
    outside_stop,
    parse_allocation,
    parse_counts,
    parse_job_record,
    parse_narrow,
    parse_node_addrs,
    parse_node_states,
    srun_steps,
    tasks_on_node,
)


@pytest.mark.parametrize(
    "text,n,expected",
    [
        ("2", 1, (2,)),
        ("2(x3)", 3, (2, 2, 2)),
        ("2(x2),1", 3, (2, 2, 1)),
        ("4,8(x2)", 3, (4, 8, 8)),
    ],
)
def test_parse_counts(text, n, expected) -> None:
    assert parse_counts(text, n, "SLURM_TASKS_PER_NODE") == expected


@pytest.mark.parametrize("text,n", [("2(x3)", 2), ("x", 1), ("2(3)", 1), ("", 1), ("1(x99999999)", 1)])
def test_parse_counts_refuses(text, n) -> None:
    with pytest.raises(InventoryError, match="SLURM_TASKS_PER_NODE"):
        parse_counts(text, n, "SLURM_TASKS_PER_NODE")


@pytest.mark.parametrize(
    "env,per_host,nodes,slots",
    [
        (
            {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "node[1-3]", "SLURM_NTASKS_PER_NODE": "2"},
            None,
            ("node1", "node2", "node3"),
            (2, 2, 2),
        ),
        (
            {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "gpu-[1-2]a,x", "SLURM_TASKS_PER_NODE": "2(x2),1"},
            None,
            ("gpu-1a", "gpu-2a", "x"),
            (2, 2, 1),
        ),
        (
            {
                "SLURM_JOB_ID": "7",
                "SLURM_JOB_NODELIST": "n[01-02]",
                "SLURM_TASKS_PER_NODE": "1(x2)",
                "SLURM_JOB_CPUS_PER_NODE": "4(x2)",
            },
            None,
            ("n01", "n02"),
            (4, 4),
        ),
        (
            {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[01-02]", "SLURM_NTASKS_PER_NODE": "2"},
            3,
            ("n01", "n02"),
            (3, 3),
        ),
        ({"SLURM_JOBID": "7", "SLURM_NODELIST": "linux[1,2]"}, None, ("linux1", "linux2"), (1, 1)),
    ],
)
def test_parse_allocation(env, per_host, nodes, slots) -> None:
    alloc = parse_allocation(env, per_host)
    assert alloc == Allocation("7", nodes, slots, 0)


def test_restart_count_is_read() -> None:
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "a", "SLURM_RESTART_COUNT": "2"}
    assert parse_allocation(env).restart_count == 2


def test_outside_an_allocation() -> None:
    assert not in_allocation({})
    with pytest.raises(PlanError, match="salloc.*mslaunch sbatch"):
        parse_allocation({"PATH": "/bin"})


def test_node_addrs_from_scontrol() -> None:
    text = (
        "NodeName=node1 Arch=x86_64 CoresPerSocket=1 NodeAddr=10.213.0.1 NodeHostName=node1 State=IDLE\n"
        "NodeName=node2 NodeAddr=10.213.0.2 State=ALLOCATED\n\n"
    )
    assert parse_node_addrs(text) == {"node1": "10.213.0.1", "node2": "10.213.0.2"}


def test_node_states_from_scontrol() -> None:
    text = (
        "NodeName=node1 Arch=x86_64 NodeAddr=10.213.0.1 State=MIXED Reason=x\n"
        "NodeName=node2 NodeAddr=10.213.0.2 State=DOWN+NOT_RESPONDING Reason=Not responding [slurm@2024]\n"
    )
    assert parse_node_states(text) == {"node1": "MIXED", "node2": "DOWN+NOT_RESPONDING"}


@pytest.mark.parametrize(
    "state,lost",
    [
        ("MIXED", False),
        ("ALLOCATED", False),
        ("IDLE+DRAIN", False),
        ("MIXED+FAIL", False),
        ("ALLOCATED+COMPLETING", False),
        ("MIXED+NOT_RESPONDING", True),
        ("DOWN+NOT_RESPONDING", True),
        ("DOWN", True),
        ("DOWN+DRAIN", True),
        ("IDLE*", True),
    ],
)
def test_a_node_is_lost_when_down_or_not_responding(state, lost) -> None:
    assert (node_lost("node2", state) == f"Slurm node node2 is {state}") is lost
    assert lost or node_lost("node2", state) is None


def test_inventory_and_narrowing() -> None:
    alloc = Allocation("9", ("node1", "node2", "node3"), (2, 2, 2))
    addrs = {"node1": "10.0.0.1", "node2": "10.0.0.2", "node3": "10.0.0.3"}
    inv = allocation_inventory(alloc, addrs)
    assert [(h.name, h.slots, h.addr) for h in inv.hosts] == [
        ("node1", 2, "10.0.0.1"),
        ("node2", 2, "10.0.0.2"),
        ("node3", 2, "10.0.0.3"),
    ]
    narrow = allocation_inventory(alloc, addrs, parse_narrow("node[2-3]:1"))
    assert [(h.name, h.slots) for h in narrow.hosts] == [("node2", 1), ("node3", 1)]
    assert parse_narrow("node3,node1:4") == [("node3", None), ("node1", 4)]
    with pytest.raises(InventoryError, match="node9.*not in the allocation"):
        allocation_inventory(alloc, addrs, parse_narrow("node9"))
    with pytest.raises(InventoryError, match="slots"):
        parse_narrow("node1:0")


def test_srun_steps_whole_argv() -> None:
    sched, workers = srun_steps(["n1", "n1", "n2"], "n1", "/py", "/j/slurm/tasks.json", "mslaunch-j-a0")
    common = [
        "srun",
        "--job-name=mslaunch-j-a0",
        "--overlap",
        "--overcommit",
        "--input=none",
        "--kill-on-bad-exit=1",
        "--cpu-bind=none",
        "--export=ALL",
    ]
    assert sched is not None
    assert list(sched.argv) == common + [
        "--nodes=1",
        "--ntasks=1",
        "--nodelist=n1",
        "/py",
        "-m",
        "launcher.execution.slurm.shim",
        "/j/slurm/tasks.json",
        "scheduler",
    ]
    assert list(workers.argv) == common + [
        "--nodes=2",
        "--ntasks=3",
        "--distribution=arbitrary",
        "/py",
        "-m",
        "launcher.execution.slurm.shim",
        "/j/slurm/tasks.json",
        "workers",
    ]
    assert workers.hostfile == ("n1", "n1", "n2")
    none, _ = srun_steps(["n1"], None, "/py", "/t", "s")
    assert none is None


# scontrol show job -o lines as Slurm 22.05 prints them while mslaunch still runs in the job
# (captured on the test cluster: a preemption with GraceTime, scontrol requeue, the time limit, scancel).
_RECORD = (
    "JobId=13 JobName=mslaunch-x UserId=root(0) GroupId=root(0) MCS_label=N/A Priority=4294901757 Nice=0 "
    "Account=(null) QOS=(null) JobState={state} Reason={reason} Dependency=(null) Requeue=1 Restarts={restarts} "
    "BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:00:03 TimeLimit=UNLIMITED TimeMin=N/A "
    "SubmitTime=2026-11-23T22:21:36 PreemptEligibleTime=2026-11-23T22:21:36 PreemptTime={preempt} "
    "StartTime=2026-11-23T22:21:37 "
    "Command=/tmp/my job/sbatch.sh WorkDir=/tmp/exp"
)


@pytest.mark.parametrize(
    "state, reason, restarts, preempt, count, expected",
    [
        (
            "RUNNING",
            "None",
            "0",
            "2026-11-23T22:21:39",
            0,
            ("preempted", "Slurm preempted job 13 at 2026-11-23T22:21:39"),
        ),
        ("PREEMPTED", "None", "0", "None", 0, ("preempted", "Slurm preempted job 13")),
        ("COMPLETING", "None", "1", "None", 0, ("preempted", "Slurm requeued job 13")),
        ("COMPLETING", "None", "2", "None", 1, ("preempted", "Slurm requeued job 13")),
        ("COMPLETING", "TimeLimit", "0", "None", 0, ("timeout", "Slurm job 13 reached its time limit")),
        ("TIMEOUT", "None", "0", "None", 0, ("timeout", "Slurm job 13 reached its time limit")),
        ("COMPLETING", "None", "0", "None", 0, ("stopped", "Slurm cancelled job 13")),
        ("CANCELLED", "None", "1", "None", 1, ("stopped", "Slurm cancelled job 13")),
        ("RUNNING", "None", "1", "None", 1, None),  # a requeued run whose rank failed by itself
        ("RUNNING", "None", "1", "2026-11-23T22:20:01", 1, None),  # ... after an earlier run was preempted
        ("RUNNING", "None", "0", "None", 0, None),
    ],
)
def test_slurms_own_reason_to_end_a_job(state, reason, restarts, preempt, count, expected) -> None:
    fields = parse_job_record(_RECORD.format(state=state, reason=reason, restarts=restarts, preempt=preempt))
    assert fields["JobState"] == state and fields["Command"] == "/tmp/my"  # a value with a space is cut there
    assert outside_stop(fields, "13", count) == expected


def test_no_record_no_outside_reason() -> None:
    assert parse_job_record("") == {} and outside_stop({}, "13", 0) is None
    assert parse_job_record("slurm_load_jobs error: Invalid job id specified") == {}


@pytest.mark.parametrize(
    "environ,expected",
    [
        ({"SLURM_STEP_TASKS_PER_NODE": "2(x2),1", "SLURM_NODEID": "2", "SLURM_LOCALID": "0"}, (1, 0)),
        ({"SLURM_STEP_TASKS_PER_NODE": "3,1", "SLURM_NODEID": "0", "SLURM_LOCALID": "2"}, (3, 2)),
        ({"SLURM_NTASKS_PER_NODE": "4", "SLURM_NODEID": "5", "SLURM_LOCALID": "1"}, (4, 1)),
        ({"SLURM_TASKS_PER_NODE": "2(x3)", "SLURM_NODEID": "1", "SLURM_LOCALID": "1"}, (2, 1)),
        ({"SLURM_STEP_TASKS_PER_NODE": "2", "SLURM_LOCALID": "3"}, None),
        ({"SLURM_STEP_TASKS_PER_NODE": "x", "SLURM_LOCALID": "0"}, None),
        ({"SLURM_STEP_TASKS_PER_NODE": "2"}, None),
    ],
)
def test_tasks_on_node_reads_this_nodes_count_and_the_local_id(environ, expected):
    assert tasks_on_node(environ) == expected
