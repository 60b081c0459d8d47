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
