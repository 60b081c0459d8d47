"""``launcher/cli/spec.py``: per-node mode as one :class:`JobShape` value, read by the steps of
``build_spec`` (the spec is built once, with the shape's values)."""

from __future__ import annotations

import pytest

from launcher.cli.options import JobOptions, job_options
from launcher.cli.spec import JobShape, build_spec, job_shape
from launcher.errors import PlanError
from launcher.planning.job.spec import NodeSpec


def opts(**kw) -> JobOptions:
    from launcher.cli.options import _FIELDS

    values = {name: None for name in _FIELDS}
    values.update(
        method="dynamic",
        master_port="8118",
        cpu_tune="off",
        no_python=False,
        mpi_hostfile=False,
        oversubscribe=False,
        program=["train.py"],
    )
    values.update(kw)
    return job_options(values)


CLUSTER = {
    "MS_NODE_RANK": "1",
    "MS_WORKER_NUM": "16",
    "MS_LOCAL_WORKER": "8",
    "MS_SCHED_HOST": "10.0.0.9",
    "MS_SCHED_PORT": "9000",
}


@pytest.mark.parametrize(
    "kw, environ, want",
    [
        # not per-node: the flags as given, whatever the environment says
        (dict(np=4, per_host=2, host_list="a:2,b:2"), CLUSTER, JobShape(4, 2, None, "8118")),
        (dict(np=4), CLUSTER, JobShape(4, None, None, "8118")),
        (dict(np=4, per_host=2, launcher="slurm"), CLUSTER, JobShape(4, 2, None, "8118")),
        # --node_rank auto: the cluster manager's variables where a flag is unset
        (dict(node_rank="auto"), CLUSTER, JobShape(16, 8, "10.0.0.9", "9000", NodeSpec(1, 8, False))),
        (
            dict(node_rank="auto", np=4, per_host=2, master_port="7000"),
            CLUSTER,
            JobShape(4, 2, "10.0.0.9", "7000", NodeSpec(1, 2, False)),
        ),
        # --node_rank N: msrun's defaults (8 workers, 8 per node capped at the job's)
        (dict(node_rank="0"), {}, JobShape(8, 8, None, "8118", NodeSpec(0, 8, None))),
        (dict(node_rank="-1", np=3), {}, JobShape(3, 3, None, "8118", NodeSpec(None, 3, None))),
        (
            dict(node_rank="2", np=4, per_host=2, master_addr="127.0.0.1"),
            {},
            JobShape(4, 2, "127.0.0.1", "8118", NodeSpec(2, 2, True)),
        ),
        # msrun's multi-node line without --node_rank: MS_NODE_RANK when set
        (dict(np=4, per_host=2), {"MS_NODE_RANK": "1"}, JobShape(4, 2, None, "8118", NodeSpec(1, 2, None))),
        (dict(np=4, per_host=2), {}, JobShape(4, 2, None, "8118", NodeSpec(None, 2, None))),
    ],
)
def test_job_shape(kw, environ, want):
    assert job_shape(opts(**kw), environ) == want


@pytest.mark.parametrize(
    "kw, environ, message",
    [
        (dict(node_rank="x"), {}, "--node_rank must be an integer or 'auto', got 'x'"),
        (
            dict(node_rank="auto"),
            {"MS_NODE_RANK": "0", "MS_WORKER_NUM": "many"},
            "MS_WORKER_NUM='many' is not an integer",
        ),
        (dict(node_rank="1", host_list="a:2"), {}, "per-node mode (--node_rank) runs this node's workers only"),
    ],
)
def test_job_shape_refusals(kw, environ, message):
    with pytest.raises(PlanError) as err:
        job_shape(opts(**kw), environ)
    assert message in str(err.value) and err.value.field == "--node_rank"


def test_the_spec_carries_the_shape(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in CLUSTER:
        monkeypatch.setenv(name, CLUSTER[name])
    spec = build_spec(opts(node_rank="auto", log_dir=str(tmp_path / "j")), job_id="j1")
    assert (spec.np, spec.per_host, spec.master_addr, spec.master_port) == (16, None, "10.0.0.9", 9000)
    assert spec.node == NodeSpec(1, 8, False) and spec.job_id == "j1" and spec.job_dir == str(tmp_path / "j")
    assert [(h.name, h.slots) for h in spec.inventory.hosts] == [("localhost", 8)]  # this node's workers
    whole = build_spec(opts(np=3, per_host=2, host_list="localhost:4", master_port="8200"))
    assert (whole.np, whole.per_host, whole.master_port, whole.node) == (3, 2, 8200, None)
