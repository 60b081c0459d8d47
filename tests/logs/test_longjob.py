"""The lines status, top and report show about a job's attempts and the hosts it left out."""
from __future__ import annotations

from launcher.logs.longjob import attempt_lines, excluded_lines, summary_notes
from launcher.logs.report import _summary_rows

EXCLUDED = [{"host": "h2", "reason": "2 failures (rank 2 killed by SIGKILL, rank 2 killed by SIGKILL)", "by": "restart", "attempt": 2}]
SUMMARY = {
    "job_id": "j1", "status": "succeeded", "exit_code": 0, "duration": 3.0, "attempts": 3, "excluded_hosts": EXCLUDED,
    "attempt_results": [{"attempt": 0, "status": "failed", "ended_because": "rank 2 on h2: killed by SIGKILL"},
                        {"attempt": 1, "status": "failed", "ended_because": "rank 2 on h2: killed by SIGKILL"},
                        {"attempt": 2, "status": "succeeded", "replanned": True}],
}
LINE = "left out h2 from attempt 2 (restart): 2 failures (rank 2 killed by SIGKILL, rank 2 killed by SIGKILL)"


def test_excluded_hosts_and_the_replanned_attempt_are_shown():
    assert excluded_lines(SUMMARY) == [LINE]
    assert excluded_lines({"excluded_hosts": "junk"}) == excluded_lines({}) == excluded_lines(None) == []
    assert attempt_lines(SUMMARY)[-1] == "attempt 2: succeeded; re-planned on spare hosts"
    assert summary_notes(SUMMARY)[0] == LINE


def test_the_report_lists_excluded_hosts_from_the_summary_or_a_running_jobs_plan():
    plan = {"job_id": "j1", "world_size": 4, "launcher": "ssh", "method": "dynamic", "hosts": ["h1", "h3"], "excluded_hosts": EXCLUDED}
    assert ("excluded hosts", LINE) in _summary_rows(plan, SUMMARY, "/j")
    assert ("excluded hosts", LINE) in _summary_rows(plan, None, "/j")  # still running: plan.json says so
    assert not any(k == "excluded hosts" for k, _ in _summary_rows(dict(plan, excluded_hosts=[]), None, "/j"))
