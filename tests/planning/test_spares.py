"""Spare hosts: re-planning a job without bad hosts keeps its world size (pure)."""

from __future__ import annotations

import json

import pytest

from launcher.errors import PlanError
from launcher.planning.build import build_plan
from launcher.planning.inventory.hostfile import parse_hostfile
from launcher.planning.job.spec import Exclusion, JobSpec
from launcher.planning.spares import replan, spare_hosts

INV = parse_hostfile("n1 slots=2\nn2 slots=2\nn3 slots=2\n", "h.txt")


def spec(**kw):
    base = dict(
        inventory=INV,
        program=("train.py",),
        python="/usr/bin/python3",
        cwd="/work",
        job_dir="/work/mslaunch_logs/j1",
        job_id="j1",
        np=4,
    )
    base.update(kw)
    return JobSpec(**base)


def test_spares_are_the_hosts_without_ranks():
    s = spec()
    assert spare_hosts(s, build_plan(s)) == ("n3",)
    assert spare_hosts(spec(np=6), build_plan(spec(np=6))) == ()


def test_replan_moves_ranks_and_the_scheduler_to_the_spare():
    s = spec()
    gone = Exclusion("n1", "2 failures: rank 0 killed by SIGKILL", "restart", attempt=2)
    plan = replan(s, [gone], 4)
    assert plan.world_size == 4
    assert [p.host for p in plan.ranks] == ["n2", "n2", "n3", "n3"]
    assert plan.scheduler.host == "n2" and plan.ranks[0].env_dict()["MS_SCHED_HOST"] == "n2"
    assert plan.excluded == (gone,)
    doc = json.loads(json.dumps(plan.to_json()))
    assert doc["excluded_hosts"] == [
        {"host": "n1", "reason": "2 failures: rank 0 killed by SIGKILL", "by": "restart", "attempt": 2}
    ]
    assert "excluded_hosts" not in build_plan(s).to_json()


def test_replan_regenerates_the_hostfile_of_mpirun():
    from launcher.planning.job.mpirun_options import MpiOptions

    s = spec(
        launcher="mpirun",
        wrapper="/t/mslaunch-rank.sh",
        method="mpi",
        mpi=MpiOptions(hostfile="/work/mslaunch_logs/j1/hostfile"),
    )
    plan = replan(s, [Exclusion("n2", "slow", "preflight")], 4)
    hostfile = next(a.content for a in plan.artefacts if a.kind == "hostfile")
    assert [line.split()[0] for line in hostfile.splitlines() if line and not line.startswith("#")] == ["n1", "n3"]


def test_master_addr_on_an_excluded_host_is_dropped():
    plan = replan(spec(master_addr="n1"), [Exclusion("n1", "faulty", "preflight")], 4)
    assert plan.scheduler.host == "n2"


@pytest.mark.parametrize(
    "gone, np, left", [(("n1",), 6, "the other hosts have 4 slots"), (("n1", "n2", "n3"), 2, "no host is left")]
)
def test_without_enough_spares_one_line_names_the_hosts(gone, np, left):
    with pytest.raises(PlanError) as err:
        replan(spec(np=np), [Exclusion(h, "slow: compute", "preflight") for h in gone], np)
    msg = str(err.value)
    assert "\n" not in msg and left in msg and "n1: slow: compute" in msg and "lower --np" in msg


def test_an_exclusion_is_listed_once():
    e1, e2 = Exclusion("n1", "slow", "preflight"), Exclusion("n1", "again", "restart", 1)
    assert replan(spec(), [e1, e2], 4).excluded == (e1,)


# ------------------------------------------------------------------ elastic: --min-hosts


@pytest.mark.parametrize("method", ["dynamic", "ranktable", "mpi"])
def test_with_min_hosts_and_no_spare_the_job_goes_on_with_every_slot_left_densely(method):
    kw = {"method": method}
    if method == "mpi":
        from launcher.planning.job.mpirun_options import MpiOptions

        kw.update(launcher="mpirun", wrapper="/t/mslaunch-rank.sh", mpi=MpiOptions(hostfile="/work/j1/hostfile"))
    if method == "ranktable":
        kw.update(device_ips={h: {d: f"10.9.{i}.{d}" for d in range(2)} for i, h in enumerate(["n1", "n2", "n3"])})
    s = spec(np=6, **kw)
    full = build_plan(s)
    assert full.planned_size == 6 and "planned_world_size" not in full.to_json()
    plan = replan(s, [Exclusion("n2", "host lost (rank 2: ssh session ended)", "restart", 1)], 6, min_hosts=2)
    assert plan.world_size == 4 and plan.planned_size == 6 and plan.to_json()["planned_world_size"] == 6
    assert [(p.rank, p.host) for p in plan.ranks] == [(0, "n1"), (1, "n1"), (2, "n3"), (3, "n3")]
    for p in plan.ranks:
        env = p.env_dict()
        assert (env["MSLAUNCH_WORLD_SIZE"], env["MSLAUNCH_PLANNED_WORLD_SIZE"], env["RANK_SIZE"]) == ("4", "6", "4")
    assert {p.env_dict()["MSLAUNCH_PLANNED_WORLD_SIZE"] for p in full.ranks} == {"6"}
    if method == "mpi":
        hostfile = next(a.content for a in plan.artefacts if a.kind == "hostfile")
        assert [ln.split()[0] for ln in hostfile.splitlines() if ln and not ln.startswith("#")] == ["n1", "n3"]
    if method == "ranktable":
        table = json.loads(next(a.content for a in plan.artefacts if a.kind == "rank_table"))
        assert table["server_count"] == "2" and [s["server_id"] for s in table["server_list"]] == ["n1", "n3"]


def test_min_hosts_uses_the_spares_first_and_never_plans_past_the_planned_size():
    s = spec(np=4)  # n3 is spare
    assert replan(s, [Exclusion("n1", "lost", "restart", 1)], 4, min_hosts=1).world_size == 4
    back = replan(s, [], 4, min_hosts=1)  # every host back: the planned size, n3 spare again
    assert (back.world_size, back.planned_size, spare_hosts(s, back)) == (4, 4, ("n3",))


@pytest.mark.parametrize(
    "gone, min_hosts, says",
    [
        (("n1", "n2"), 2, "1 host left (n3), fewer than --min-hosts 2"),
        (("n1", "n2", "n3"), 1, "0 hosts left (none), fewer than --min-hosts 1"),
    ],
)
def test_below_min_hosts_one_line_names_the_hosts_lost_and_why(gone, min_hosts, says):
    with pytest.raises(PlanError) as err:
        replan(spec(np=6), [Exclusion(h, f"host lost ({h} gone)", "restart", 1) for h in gone], 6, min_hosts=min_hosts)
    msg = str(err.value)
    assert "\n" not in msg and says in msg and err.value.field == "--min-hosts", msg
    assert all(f"{h}: host lost ({h} gone)" in msg for h in gone), msg


def test_the_planned_size_is_reserved():
    with pytest.raises(PlanError, match="MSLAUNCH_PLANNED_WORLD_SIZE is set by mslaunch") as err:
        build_plan(spec(env=(("MSLAUNCH_PLANNED_WORLD_SIZE", "8"),)))
    assert err.value.field == "--env"
