"""The report's timeline shows the pre-flight check's event (hosts left out and why)."""

from __future__ import annotations

from launcher.logs.report.page import _html_events


def test_the_preflight_event_is_on_the_timeline() -> None:
    events = [
        {
            "time": 10.0,
            "kind": "preflight",
            "mode": "exclude",
            "excluded": [
                {"host": "h2", "reason": "slow: compute 0.21 GFLOPS, median 3.43; threshold 0.5", "by": "preflight"}
            ],
        },
        {"time": 10.5, "kind": "job_start", "job_id": "j"},
    ]
    html = "".join(_html_events([], events, 10.0))
    assert "The pre-flight check (exclude) ran; it left out h2 (slow: compute 0.21 GFLOPS" in html
    assert html.index("pre-flight") < html.index("The job j started.")
