"""str enums (launcher.planning.job.kinds): members are their strings in JSON, formatting, comparisons
and dict keys; and the places that define these values use them."""

from __future__ import annotations

import json

import pytest

from launcher.execution import results
from launcher.planning.build import build_plan
from launcher.planning.inventory.hostarg import parse_host_list
from launcher.planning.job import envs
from launcher.planning.job.kinds import ArtefactKind, EventKind, JobStatus, Method, Role, StrEnum, values
from launcher.planning.job.spec import JobSpec

ALL = [m for enum in (Method, Role, JobStatus, ArtefactKind, EventKind) for m in enum]


@pytest.mark.parametrize("member", ALL, ids=[f"{type(m).__name__}.{m.name}" for m in ALL])
def test_member_is_its_string(member):
    value = member.value
    assert isinstance(member, str) and member == value and value == member
    assert (
        str(member) == value and f"{member}" == value and f"{member:>12}" == f"{value:>12}" and "%s" % member == value
    )
    assert json.dumps(member) == json.dumps(value)
    assert json.dumps({member: [member]}) == json.dumps({value: [value]})
    assert json.loads(json.dumps(member)) == member
    assert {value: 1}[member] == 1 and {member: 1}[value] == 1
    assert type(member)(value) is member


def test_values_are_in_definition_order():
    assert values(Method) == ("dynamic", "ranktable", "mpi") == envs.METHODS
    assert values(Role) == ("worker", "scheduler", "launcher")
    assert values(JobStatus)[:4] == ("succeeded", "failed", "timeout", "stopped")


def test_a_strenum_subclass_formats_as_its_value():
    class Colour(StrEnum):
        RED = "red"

    assert f"[{Colour.RED}]" == "[red]" and repr(Colour.RED) == "<Colour.RED: 'red'>"


def test_definition_sites_use_the_enums():
    assert (results.SUCCEEDED, results.FAILED, results.TIMEOUT, results.STOPPED) == tuple(JobStatus)[:4]
    assert all(type(s) is JobStatus for s in (results.SUCCEEDED, results.FAILED, results.TIMEOUT, results.STOPPED))
    assert set(envs.RESERVED) == set(Method)


def test_plan_json_keeps_strings():
    ips = {"localhost": {0: "192.1.27.6", 1: "192.2.27.6"}}
    spec = JobSpec(
        inventory=parse_host_list("localhost:2"),
        program=("t.py",),
        python="/p",
        cwd="/w",
        job_dir="/w/j",
        job_id="j",
        method=Method.RANKTABLE,
        device_ips=ips,
    )
    plan = build_plan(spec)
    assert all(r.role is Role.WORKER for r in plan.ranks)
    text = json.dumps(plan.to_json())
    back = json.loads(text)
    assert back["method"] == "ranktable" and type(back["method"]) is str
    assert back["artefacts"][0]["kind"] == "rank_table" and '"kind": "rank_table"' in text


def test_plan_with_plain_string_method_equals_enum_plan():
    base = dict(
        inventory=parse_host_list("localhost:2"), program=("t.py",), python="/p", cwd="/w", job_dir="/w/j", job_id="j"
    )
    assert build_plan(JobSpec(method="dynamic", **base)) == build_plan(JobSpec(method=Method.DYNAMIC, **base))
    assert build_plan(JobSpec(**base)).scheduler.role == "scheduler"


def test_job_result_json_status_is_a_string():
    res = results.JobResult(
        job_id="j", job_dir="/j", status=results.FAILED, exit_code=1, started=0.0, ended=1.0, attempts=1, processes=()
    )
    out = json.loads(json.dumps(res.to_json()))
    assert out["status"] == "failed" and type(out["status"]) is str
