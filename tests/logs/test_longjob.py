"""The lines status, top and report show about a job's attempts and the hosts it left out."""

from __future__ import annotations

from launcher.logs.longjob import attempt_lines, excluded_lines, summary_notes
from launcher.logs.report.page import _summary_rows

EXCLUDED = [
    {
        "host": "h2",
        "reason": "2 failures (rank 2 killed by SIGKILL, rank 2 killed by SIGKILL)",
        "by": "restart",
        "attempt": 2,
    }
]
SUMMARY = {
    "job_id": "j1",
    "status": "succeeded",
    "exit_code": 0,
    "duration": 3.0,
    "attempts": 3,
    "excluded_hosts": EXCLUDED,
    "attempt_results": [
        {"attempt": 0, "status": "failed", "ended_because": "rank 2 on h2: killed by SIGKILL"},
        {"attempt": 1, "status": "failed", "ended_because": "rank 2 on h2: killed by SIGKILL"},
        {"attempt": 2, "status": "succeeded", "replanned": True},
    ],
}
LINE = "left out h2 from attempt 2 (restart): 2 failures (rank 2 killed by SIGKILL, rank 2 killed by SIGKILL)"


def test_excluded_hosts_and_the_replanned_attempt_are_shown():
    assert excluded_lines(SUMMARY) == [LINE]
    assert excluded_lines({"excluded_hosts": "junk"}) == excluded_lines({}) == excluded_lines(None) == []
    assert attempt_lines(SUMMARY)[-1] == "attempt 2: succeeded; re-planned on spare hosts"
    assert summary_notes(SUMMARY)[0] == LINE


def test_the_report_lists_excluded_hosts_from_the_summary_or_a_running_jobs_plan():
    plan = {
        "job_id": "j1",
        "world_size": 4,
        "launcher": "ssh",
        "method": "dynamic",
        "hosts": ["h1", "h3"],
        "excluded_hosts": EXCLUDED,
    }
    assert ("excluded hosts", LINE) in _summary_rows(plan, SUMMARY, "/j")
    assert ("excluded hosts", LINE) in _summary_rows(plan, None, "/j")  # still running: plan.json says so
    assert not any(k == "excluded hosts" for k, _ in _summary_rows(dict(plan, excluded_hosts=[]), None, "/j"))


def test_process_table_is_the_current_attempts_processes_with_their_state():
    """``status`` of a running job: every process started in the newest attempt, its host and
    pid, ``running`` until its ``exited`` event; earlier attempts' processes are not listed."""
    from launcher.logs.longjob import process_lines, process_table

    events = [
        {"kind": "job_start"},
        {"kind": "started", "name": "scheduler", "rank": None, "host": "h1", "pid": 10, "attempt": 0},
        {"kind": "started", "name": "rank 0", "rank": 0, "host": "h1", "pid": 11, "attempt": 0},
        {"kind": "exited", "name": "rank 0", "rank": 0, "host": "h1", "returncode": -9, "attempt": 0},
        {"kind": "restart", "attempt": 1},
        {"kind": "started", "name": "scheduler", "rank": None, "host": "h1", "pid": 20, "attempt": 1},
        {"kind": "started", "name": "rank 0", "rank": 0, "host": "h1", "pid": 21, "attempt": 1},
        {"kind": "started", "name": "rank 1", "rank": 1, "host": "node-02", "pid": None, "attempt": 1},
        {"kind": "exited", "name": "rank 1", "rank": 1, "host": "node-02", "returncode": 0, "attempt": 1},
        {"kind": "exited", "name": "rank 9", "returncode": 1, "attempt": 1},  # never started: ignored
    ]
    table = process_table(events)
    assert table == [
        {
            "name": "scheduler",
            "rank": None,
            "host": "h1",
            "pid": 20,
            "attempt": 1,
            "state": "running",
            "returncode": None,
        },
        {"name": "rank 0", "rank": 0, "host": "h1", "pid": 21, "attempt": 1, "state": "running", "returncode": None},
        {
            "name": "rank 1",
            "rank": 1,
            "host": "node-02",
            "pid": None,
            "attempt": 1,
            "state": "exit code 0",
            "returncode": 0,
        },
    ]
    assert process_lines(table) == [
        "scheduler  h1       pid 20  running",
        "rank 0     h1       pid 21  running",
        "rank 1     node-02  pid -  exit code 0",
    ]
    assert (
        process_table([{"kind": "started", "name": "rank 0", "host": "h", "pid": 5}])[0]["state"] == "running"
    )  # old events
    assert process_table([]) == [] and process_lines([]) == []


def test_a_pid_learnt_after_the_start_replaces_the_unknown_one_and_a_stand_ins_ranks_get_rows():
    """The ssh agent reports a rank's pid after its ``started`` event; mpirun's ranks come only with
    ``pid`` events (the stand-in ``mpirun`` has the ``started`` one)."""
    from launcher.logs.longjob import process_table

    events = [
        {"kind": "started", "name": "rank 0", "rank": 0, "host": "node-01", "pid": None, "attempt": 0},
        {"kind": "pid", "name": "rank 0", "rank": 0, "host": "node-01", "pid": 4242, "attempt": 0},
        {"kind": "started", "name": "mpirun", "rank": None, "host": "localhost", "pid": 77, "attempt": 0},
        {"kind": "pid", "name": "rank 1", "rank": 1, "host": "node-02", "pid": 99, "attempt": 0},
        {"kind": "pid", "name": "rank 5", "rank": 5, "host": "node-02", "pid": 98, "attempt": -1},  # an older attempt
        {"kind": "exited", "name": "rank 0", "rank": 0, "host": "node-01", "returncode": 0, "attempt": 0},
    ]
    assert [(r["name"], r["host"], r["pid"], r["state"]) for r in process_table(events)] == [
        ("rank 0", "node-01", 4242, "exit code 0"),
        ("mpirun", "localhost", 77, "running"),
        ("rank 1", "node-02", 99, "running"),
    ]


def test_stragglers_of_the_summary_and_of_a_running_job() -> None:
    from launcher.logs.longjob import running_stragglers, straggler_lines

    row = {"rank": 1, "host": "h2", "attempt": 0, "since": 0.0, "evidence": "rank 1 on h2 waited for CPU 90 %"}
    (line,) = summary_notes({"stragglers": [dict(row, cleared=60.0)]})
    assert line.startswith("straggler since ") and "(attempt 0, cleared " in line and line.endswith("CPU 90 %")
    named = dict(row, kind="straggler", cleared=False)
    events = [{"kind": "started", "attempt": 0}, named, dict(named, rank=2), dict(named, rank=2, cleared=True)]
    now = running_stragglers(events)
    assert [r["rank"] for r in now] == [1]
    assert straggler_lines(now) == [line.split(", cleared")[0] + "): rank 1 on h2 waited for CPU 90 %"]
    assert running_stragglers([{"kind": "started", "attempt": 1}, named]) == []  # an earlier attempt's


def test_an_attempt_planned_smaller_or_grown_back_says_its_size():
    summary = {
        "attempt_results": [
            {"attempt": 0, "status": "failed"},
            {"attempt": 1, "status": "planned", "replanned": True},
            {"attempt": 2, "status": "succeeded", "replanned": True},
        ],
        "resized": [
            {"attempt": 1, "world_size": 1, "previous": 3, "planned": 3, "hosts": 1, "why": "h2: host lost"},
            {"attempt": 2, "world_size": 3, "previous": 1, "planned": 3, "hosts": 3, "why": "back: h2"},
        ],
    }
    assert attempt_lines(summary)[1:] == [
        "attempt 1: planned; re-planned: 1 of 3 ranks on 1 host",
        "attempt 2: succeeded; re-planned: 3 of 3 ranks on 3 hosts",
    ]
    assert attempt_lines({**summary, "resized": "junk"})[1] == "attempt 1: planned; re-planned on spare hosts"
