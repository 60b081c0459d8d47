"""The job layout (launcher.planning.job.layout): names round-trip through the regexes that read
them back, and every user of the layout (plan, rank wrapper, log follower, metrics, job dirs)
agrees with it."""

from __future__ import annotations

import os
import subprocess

import pytest

from launcher.jobs.jobdir import latest_attempt_dir
from launcher.logs.follow import job_log_sources
from launcher.logs.metricsfile import job_metric_sources
from launcher.planning.backends.mpirun import mpirun_command
from launcher.planning.build import build_plan
from launcher.planning.inventory.hostarg import parse_host_list
from launcher.planning.inventory.hostfile import parse_hostfile
from launcher.planning.job import layout
from launcher.planning.job.mpirun_options import MpiOptions
from launcher.planning.job.spec import JobSpec
from tests.harness.paths import REPO

ROOT = REPO
WRAPPER = os.path.join(ROOT, "templates", "mslaunch-rank.sh")
JOB = "/work/mslaunch_logs/j1"


def spec(**kw) -> JobSpec:
    base = dict(
        inventory=parse_host_list("localhost:2"),
        program=("train.py",),
        python="/usr/bin/python3",
        cwd="/work",
        job_dir=JOB,
        job_id="j1",
    )
    base.update(kw)
    return JobSpec(**base)


@pytest.mark.parametrize("rank", [0, 1, 9, 10, 255, 16383, 10**12])
def test_worker_log_names_round_trip(rank):
    name = layout.worker_log_name(rank)
    assert name == f"worker_{rank}.log"
    assert layout.parse_worker_log(name) == rank
    assert layout.worker_log(JOB, rank) == f"{JOB}/{name}"
    assert layout.fill_rank(layout.worker_log_template(), rank) == name


@pytest.mark.parametrize("attempt", [1, 2, 10, 123])
def test_attempt_dirs_round_trip(attempt):
    name = layout.attempt_dir_name(attempt)
    assert name == f"attempt_{attempt}"
    assert layout.parse_attempt_dir(name) == attempt
    assert layout.attempt_dir(JOB, attempt) == f"{JOB}/{name}"


def test_attempt_zero_is_the_job_dir():
    assert layout.attempt_dir(JOB, 0) == JOB


@pytest.mark.parametrize(
    "name",
    [
        "worker_.log",
        "worker_1.log.1",
        "worker_-1.log",
        "worker_1.txt",
        "xworker_1.log",
        "worker_1x.log",
        "scheduler.log",
        "train_1.log",
        "worker_1.log\n",
    ],
)
def test_parse_worker_log_refuses_other_names(name):
    assert layout.parse_worker_log(name) is None


@pytest.mark.parametrize("name", ["attempt_", "attempt_x", "attempt_1/", "attempt_1\n", "xattempt_1", "attempt-1"])
def test_parse_attempt_dir_refuses_other_names(name):
    assert layout.parse_attempt_dir(name) is None


def test_custom_worker_log_prefix_is_not_read_as_a_default_log():
    name = layout.worker_log_name(3, "train")
    assert name == "train_3.log"
    assert layout.worker_log_template("train") == "train_{rank}.log"
    assert layout.parse_worker_log(name) is None


def test_fill_rank_replaces_the_last_placeholder_only():
    assert layout.fill_rank("a{rank}b_{rank}.log", 6) == "a{rank}b_6.log"
    assert layout.worker_log_name(6, "a{rank}b") == "a{rank}b_6.log"
    assert layout.fill_rank("no-placeholder.log", 6) == "no-placeholder.log"


def test_job_files():
    assert [
        layout.job_file(JOB, n)
        for n in (
            layout.PLAN_FILE,
            layout.SUMMARY_FILE,
            layout.JOB_FILE,
            layout.LOCK_FILE,
            layout.EVENTS_FILE,
            layout.METRICS_FILE,
        )
    ] == [
        f"{JOB}/plan.json",
        f"{JOB}/summary.json",
        f"{JOB}/job.json",
        f"{JOB}/job.lock",
        f"{JOB}/events.jsonl",
        f"{JOB}/metrics.jsonl",
    ]


def test_rank_cwd_and_env_dump():
    assert layout.rank_cwd(JOB, 7) == f"{JOB}/device7"
    assert layout.rank_cwd(JOB, 7) == layout.rank_cwd_prefix(JOB) + "7"
    assert layout.env_dump_path(layout.rank_cwd(JOB, 7), 7) == f"{JOB}/device7/env7.log"


def test_plan_paths_come_from_the_layout():
    plan = build_plan(spec(worker_log_name="train"))
    assert [r.log for r in plan.ranks] == [layout.worker_log(JOB, 0, "train"), layout.worker_log(JOB, 1, "train")]
    assert plan.scheduler is not None and plan.scheduler.log == layout.scheduler_log(JOB) == f"{JOB}/scheduler.log"


def test_ranktable_plan_cwds_and_artefact_from_the_layout():
    ips = {"10.0.0.1": {d: f"192.1.27.{6 + d}" for d in range(8)}}
    plan = build_plan(spec(inventory=parse_hostfile("10.0.0.1 slots=8\n", "h.txt"), method="ranktable", device_ips=ips))
    r5 = plan.ranks[5]
    assert (r5.cwd, r5.env_dump) == (layout.rank_cwd(JOB, 5), layout.env_dump_path(layout.rank_cwd(JOB, 5), 5))
    assert r5.env_dict()["RANK_TABLE_FILE"] == layout.artefact_path(JOB, layout.RANK_TABLE_FILE)
    assert [a.name for a in plan.artefacts] == [layout.RANK_TABLE_FILE]


def test_mpirun_wrapper_is_given_the_log_name():
    plan = build_plan(
        spec(
            inventory=parse_host_list("localhost:2"),
            method="mpi",
            launcher="mpirun",
            wrapper="/opt/w.sh",
            mpi=MpiOptions(),
            worker_log_name="train",
        )
    )
    argv = list(mpirun_command(plan))
    assert argv[argv.index("MSLAUNCH_LOG_DIR=" + JOB) + 2] == "MSLAUNCH_LOG_NAME=train_{rank}.log"
    assert not any("worker_" in a for a in argv)


@pytest.mark.parametrize("prefix", [None, "train", "a{rank}b"])
def test_rank_wrapper_writes_the_log_the_plan_names(tmp_path, prefix):
    """The wrapper template spells no log name: it writes where the launcher's template says; and
    it records the program's own pid beside the log, for ``status`` (launcher/execution/process/rankpids.py)."""
    log_dir = tmp_path / "logs"
    env = dict(
        os.environ,
        OMPI_COMM_WORLD_RANK="3",
        MSLAUNCH_CTX_BASE="1",
        MSLAUNCH_ROLE="worker",
        MSLAUNCH_FIRST_RANK="4",
        MSLAUNCH_DEVICES="0,1,2",
        MSLAUNCH_LOG_DIR=str(log_dir),
        MSLAUNCH_LOG_NAME=layout.worker_log_template(prefix),
        MSLAUNCH_METHOD="dynamic",
    )
    # its own session: the wrapper reaps its process group when the program ends
    done = subprocess.run(
        ["sh", WRAPPER, "sh", "-c", 'echo "rank=$RANK_ID device=$DEVICE_ID pid=$$"'],
        env=env,
        start_new_session=True,
        timeout=60,
    )
    assert done.returncode == 0
    assert sorted(os.listdir(log_dir)) == sorted([layout.worker_log_name(6, prefix), "rank-pids"])
    text = (log_dir / layout.worker_log_name(6, prefix)).read_text()
    pid = (log_dir / "rank-pids" / "rank6").read_text()
    assert text == f"rank=6 device=2 pid={pid}" and os.listdir(log_dir / "rank-pids") == ["rank6"]


def test_readers_find_what_the_layout_names(tmp_path):
    job = str(tmp_path)
    for folder in (layout.attempt_dir(job, 0), layout.attempt_dir(job, 1), layout.attempt_dir(job, 2)):
        os.makedirs(folder, exist_ok=True)
        for rank in (0, 1, 10):
            open(layout.worker_log(folder, rank), "w").close()
        open(layout.scheduler_log(folder), "w").close()
    open(layout.worker_log(job, 5, "train"), "w").close()  # not a default name: not a rank log
    assert latest_attempt_dir(job) == layout.attempt_dir(job, 2)
    sources = job_log_sources(layout.attempt_dir(job, 2))
    assert [(s.label, s.path) for s in sources] == [
        ("rank 0", layout.worker_log(layout.attempt_dir(job, 2), 0)),
        ("rank 1", layout.worker_log(layout.attempt_dir(job, 2), 1)),
        ("rank 10", layout.worker_log(layout.attempt_dir(job, 2), 10)),
        ("scheduler", layout.scheduler_log(layout.attempt_dir(job, 2))),
    ]
    assert [s.path for s in job_metric_sources(job)] == [
        layout.worker_log(layout.attempt_dir(job, k), r) for k in (0, 1, 2) for r in (0, 1, 10)
    ]
