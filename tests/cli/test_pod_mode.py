"""Per-node mode inside a pod: --node_rank auto from JOB_COMPLETION_INDEX / VC_TASK_INDEX, the
scheduler's DNS name waited for and replaced by its address, every rank's lines on stdout."""

from __future__ import annotations

import pytest

from launcher.cli.msrun_flags import node_rank_from_env
from launcher.cli.options import JobOptions, job_options
from launcher.cli.pod import console_default, resolve_master
from launcher.errors import LaunchError
from launcher.execution.resolve import wait_resolved


@pytest.mark.parametrize(
    "env, expected",
    [
        ({"JOB_COMPLETION_INDEX": "2"}, (2, "JOB_COMPLETION_INDEX")),
        ({"VC_TASK_INDEX": "5", "VK_TASK_INDEX": "5"}, (5, "VC_TASK_INDEX")),
        ({"MS_NODE_RANK": "1", "JOB_COMPLETION_INDEX": "2"}, (1, "MS_NODE_RANK")),  # the Ascend Operator's, first
    ],
)
def test_node_rank_auto_reads_the_job_index(env, expected):
    assert node_rank_from_env(env) == expected


def test_a_bad_index_is_one_line():
    with pytest.raises(Exception) as err:
        node_rank_from_env({"JOB_COMPLETION_INDEX": "x"})
    assert "JOB_COMPLETION_INDEX='x' is not a node index" in str(err.value)


def test_wait_resolved_waits_for_a_late_name():
    answers = iter([None, None, "10.1.2.3"])
    told = []
    assert (
        wait_resolved("job-0.job", 30, lookup=lambda name: next(answers), on_wait=lambda: told.append(1)) == "10.1.2.3"
    )
    assert told == [1]


def test_wait_resolved_gives_up_with_one_line():
    with pytest.raises(LaunchError) as err:
        wait_resolved("job-0.job", 0.2, lookup=lambda name: None)
    msg = str(err.value)
    assert "'job-0.job' did not resolve within --start-timeout 0.2 s" in msg and "\n" not in msg
    assert err.value.exit_code == 1


def test_addresses_are_not_looked_up():
    def never(name):
        raise AssertionError(name)

    assert wait_resolved("10.0.0.7", 1, lookup=never) == "10.0.0.7"
    assert wait_resolved("fe80::1", 1, lookup=never) == "fe80::1"


def opts(**kw) -> JobOptions:
    from launcher.cli.options import _FIELDS

    values = {name: None for name in _FIELDS}
    values.update(
        method="dynamic", master_port="8118", cpu_tune="auto", no_python=False, mpi_hostfile=False, oversubscribe=False
    )
    values.update(kw)
    return job_options(values)


def test_resolve_master_per_node_only(monkeypatch):
    import launcher.execution.resolve as resolve

    monkeypatch.setattr(resolve, "lookup_ipv4", lambda name: {"job-0.job": "10.9.8.7", "sched": "10.9.8.6"}.get(name))
    got = resolve_master(opts(node_rank="1", np=4, per_host=2, master_addr="job-0.job"), 5, {})
    assert got.master_addr == "10.9.8.7"
    got = resolve_master(opts(node_rank="auto", np=4, per_host=2), 5, {"MS_SCHED_HOST": "sched"})  # the operator's name
    assert got.master_addr == "10.9.8.6"
    whole = opts(np=4, master_addr="job-0.job", host_list="a:2,b:2")  # not per-node: the inventory's business
    assert resolve_master(whole, 5, {}) is whole


def test_console_prints_every_rank_in_a_pod():
    pod = {"KUBERNETES_SERVICE_HOST": "10.96.0.1"}
    node = opts(node_rank="0", np=4, per_host=2)
    assert console_default(node, None, pod) == "all"
    assert console_default(node, "rank0", pod) == "rank0"  # --tee wins
    assert (
        console_default(opts(node_rank="0", np=4, per_host=2, tail_worker_log="0"), None, pod) is None
    )  # msrun's flag wins
    assert console_default(node, None, {}) is None  # not in a pod
    assert console_default(opts(np=4), None, pod) is None  # not per-node mode
