"""The report's timeline in words (launcher.logs.report.story): a straggler named and cleared."""

from __future__ import annotations

from launcher.logs.report.story import story


def test_a_straggler_named_and_cleared_is_told_in_words() -> None:
    named = {"time": 5.0, "kind": "straggler", "rank": 2, "host": "h3", "attempt": 0, "cleared": False}
    events = [
        {"time": 1.0, "kind": "started", "name": "rank 2", "rank": 2, "host": "h3", "attempt": 0},
        dict(named, evidence="rank 2 on h3 waited for CPU 97 % of its runnable time over the last 30 s"),
        dict(named, time=9.0, cleared=True, evidence="rank 2 on h3 waited for CPU 30 %"),
    ]
    lines = [(line.kind, line.text) for line in story(events, []) if line.kind == "straggler"]
    assert lines == [
        (
            "straggler",
            "mslaunch named rank 2 on h3 a straggler: rank 2 on h3 waited for CPU 97 % of its runnable time"
            " over the last 30 s.",
        ),
        ("straggler", "rank 2 on h3 was no longer a straggler: rank 2 on h3 waited for CPU 30 %."),
    ]


def test_a_job_that_went_on_smaller_and_grew_back_is_told_in_words() -> None:
    events = [
        {"time": 2.0, "kind": "resized", "attempt": 1, "world_size": 4, "previous": 6, "planned": 6, "hosts": 2,
         "why": "h2: host lost (rank 2: connection lost)"},
        {"time": 5.0, "kind": "host_rejoined", "host": "h2", "attempt": 3, "left_out": "host lost"},
        {"time": 5.0, "kind": "resized", "attempt": 3, "world_size": 6, "previous": 4, "planned": 6, "hosts": 3,
         "why": "back: h2"},
    ]  # fmt: skip
    lines = [(line.kind, line.text) for line in story(events, []) if line.kind in ("resized", "host_rejoined")]
    assert lines == [
        (
            "resized",
            "Attempt 1 went on with 4 of the 6 planned ranks on 2 hosts (h2: host lost (rank 2: connection lost)).",
        ),
        ("host_rejoined", "h2 answered again and was given ranks from attempt 3 on."),
        ("resized", "Attempt 3 grew back to 6 of the 6 planned ranks on 3 hosts (back: h2)."),
    ]


def test_a_checkpoint_not_written_is_told_with_its_reason() -> None:
    events = [{"time": 2.0, "kind": "ckpt_failed", "rank": 1, "attempt": 0, "why": "rank 1: [Errno 28] No space"}]
    assert [(line.kind, line.text) for line in story(events, [])] == [
        ("ckpt_failed", "Rank 1 could not write a checkpoint (rank 1: [Errno 28] No space); the job trained on.")
    ]


def test_one_host_is_one_host() -> None:
    e = {
        "time": 2.0,
        "kind": "resized",
        "attempt": 1,
        "world_size": 1,
        "previous": 3,
        "planned": 3,
        "hosts": 1,
        "why": "x",
    }
    (line,) = [line.text for line in story([e], []) if line.kind == "resized"]
    assert line == "Attempt 1 went on with 1 of the 3 planned ranks on 1 host (x)."
