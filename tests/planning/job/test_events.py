"""The job's events (launcher.planning.job.events): one payload per kind, each writing exactly the
events.jsonl data the report, ``status`` and ``top`` read."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from launcher.execution.results import ProcResult, RootCause
from launcher.logs.causes import Cause
from launcher.logs.metricsfile import append_event, read_events
from launcher.planning.job import events as ev
from launcher.planning.job.ckptinterval import Advice
from launcher.planning.job.kinds import EventKind
from launcher.planning.job.spec import Exclusion

_CAUSE = RootCause(
    ProcResult("rank 1", 1, "h1", 3, 0.0, 2.5, "/j/worker_1.log"),
    ("Traceback", "ValueError: bad"),
    Cause("python_exception", "ValueError: bad", "fix it"),
)

CASES = [
    (
        ev.Preflight(
            "exclude",
            1.25,
            "network note",
            (ev.PreflightHost("h1", "ok", ""), ev.PreflightHost("h2", "slow", "slow: x")),
            {"target": "cpu"},
            (Exclusion("h2", "slow: x", "preflight", 0),),
        ),
        {
            "mode": "exclude",
            "seconds": 1.25,
            "network": "network note",
            "hosts": [
                {"host": "h1", "verdict": "ok", "reason": ""},
                {"host": "h2", "verdict": "slow", "reason": "slow: x"},
            ],
            "excluded": [{"host": "h2", "reason": "slow: x", "by": "preflight", "attempt": 0}],
            "devices": {"target": "cpu"},
        },
    ),
    (ev.JobStart("job1"), {"job_id": "job1"}),
    (
        ev.Started("rank 0", 0, "h1", 123, "/j/worker_0.log", 1),
        {"name": "rank 0", "rank": 0, "host": "h1", "pid": 123, "log": "/j/worker_0.log", "attempt": 1},
    ),
    (
        ev.Pid("rank 1", 1, "h2", 4242, 0),
        {"name": "rank 1", "rank": 1, "host": "h2", "pid": 4242, "attempt": 0},
    ),
    (
        ev.Exited("scheduler", None, "h1", -9, 0),
        {"name": "scheduler", "rank": None, "host": "h1", "returncode": -9, "attempt": 0},
    ),
    (ev.Failure("rank 1", "h1", 3), {"name": "rank 1", "host": "h1", "returncode": 3}),
    (ev.Teardown(("rank 0", "rank 2")), {"names": ["rank 0", "rank 2"]}),
    (
        ev.Restart(1, _CAUSE, 4),
        {
            "attempt": 1,
            "cause": {
                "name": "rank 1",
                "rank": 1,
                "host": "h1",
                "exit_code": 3,
                "signal": None,
                "reason": "exit code 3",
                "log": "/j/worker_1.log",
                "tail": ["Traceback", "ValueError: bad"],
                "time": 2.5,
                "cause": {"kind": "python_exception", "evidence": "ValueError: bad", "hint": "fix it"},
            },
            "env_attempt": 4,
        },
    ),
    (ev.Restart(2, None, 2), {"attempt": 2, "cause": None, "env_attempt": 2}),
    (
        ev.Restart(2, None, 2, Advice(40.0, 1.25, 800.0, 2, 5.0)),
        {
            "attempt": 2,
            "cause": None,
            "env_attempt": 2,
            "ckpt_interval": {"seconds": 40.0, "ckpt_seconds": 1.25, "mtbf_seconds": 800.0, "faults": 2, "steps": 8},
        },
    ),
    (ev.TimedOut(0.5), {"timeout": 0.5}),
    (ev.Interrupted(15), {"signal": 15}),
    (ev.Hung("no progress for 60 s", {"culprit": 1}), {"message": "no progress for 60 s", "hang": {"culprit": 1}}),
    (ev.StopRestarts("crash loop"), {"message": "crash loop"}),
    (
        ev.HostExcluded(Exclusion("h2", "2 failures", "restart", 3), "rank 2 moves to h4"),
        {"host": "h2", "reason": "2 failures", "by": "restart", "attempt": 3, "moves": "rank 2 moves to h4"},
    ),
    (ev.PlannedRestart("h2 answers again"), {"reason": "h2 answers again"}),
    (ev.HostRejoined("h2", 4, "host lost (x)"), {"host": "h2", "attempt": 4, "left_out": "host lost (x)"}),
    (
        ev.Resized(3, 4, 6, 6, 2, "h2: host lost (x)"),
        {"attempt": 3, "world_size": 4, "previous": 6, "planned": 6, "hosts": 2, "why": "h2: host lost (x)"},
    ),
    (ev.ClusterStop("preempted", "Slurm preempted job 5"), {"status": "preempted", "message": "Slurm preempted job 5"}),
    (ev.JobEnd("failed", 3, "oom"), {"status": "failed", "exit_code": 3, "cause": "oom"}),
    (ev.JobEnd("succeeded", 0), {"status": "succeeded", "exit_code": 0, "cause": None}),
    (
        ev.MetricsEndpoint("http://127.0.0.1:9400/metrics", "/tf/j.prom"),
        {"url": "http://127.0.0.1:9400/metrics", "textfile": "/tf/j.prom"},
    ),
    (
        ev.Straggler(2, "h3", "rank 2 on h3 waited", 7.5, 1),
        {
            "rank": 2,
            "host": "h3",
            "evidence": "rank 2 on h3 waited",
            "since": 7.5,
            "attempt": 1,
            "cleared": False,
            "by": "cpu",
        },
    ),
    (ev.CheckpointFailed(1, 0, "rank 1: disk full"), {"rank": 1, "attempt": 0, "why": "rank 1: disk full"}),
]


def test_every_kind_has_one_payload():
    assert set(ev.PAYLOADS) == set(EventKind)
    assert {type(e) for e, _ in CASES} == set(ev.PAYLOADS.values())
    assert all(dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen for cls in ev.PAYLOADS.values())


@pytest.mark.parametrize("event, data", CASES, ids=[type(e).__name__ for e, _ in CASES])
def test_the_json_of_each_payload(event, data):
    assert event.to_json() == data
    assert list(event.to_json()) == list(data)  # the keys' order: the events.jsonl line's
    assert json.loads(json.dumps(event.to_json())) == data


def test_an_events_jsonl_line_is_the_payload_then_time_and_kind(tmp_path):
    event = ev.Failure("rank 1", "h1", 3)
    append_event(str(tmp_path), event, when=12.3456)
    with open(os.path.join(tmp_path, "events.jsonl"), encoding="utf-8") as f:
        assert f.read() == '{"name":"rank 1","host":"h1","returncode":3,"time":12.346,"kind":"failure"}\n'
    assert read_events(str(tmp_path)) == [
        {"name": "rank 1", "host": "h1", "returncode": 3, "time": 12.346, "kind": "failure"}
    ]


def test_payloads_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        ev.Failure("rank 1", "h1", 3).returncode = 0  # type: ignore[misc]
