"""The report names a failed job's cause: a ``<p id="cause">`` under the root cause, and rows of
its summary table."""

from __future__ import annotations

from launcher.logs.report.page import _html_summary, _summary_rows

CAUSE = {
    "kind": "missing_file",
    "evidence": "FileNotFoundError: [Errno 2] No such file or directory: '/d/<x>.ckpt'",
    "hint": "make /d/<x>.ckpt exist on h1",
}
SUMMARY = {
    "status": "failed",
    "exit_code": 1,
    "duration": 2.0,
    "attempts": 1,
    "root_cause": {
        "name": "rank 0",
        "host": "h1",
        "reason": "exit code 1",
        "log": "/j/worker_0.log",
        "tail": ["x"],
        "cause": CAUSE,
    },
}
PLAN = {"job_id": "j", "world_size": 1}


def test_the_cause_is_in_the_head_and_the_summary_rows():
    html = "\n".join(_html_summary("/j", PLAN, SUMMARY))
    assert (
        '<p id="cause">cause: <b>missing_file</b>: FileNotFoundError: [Errno 2] No such file or directory: '
        "&#x27;/d/&lt;x&gt;.ckpt&#x27;<br>hint: make /d/&lt;x&gt;.ckpt exist on h1</p>"
    ) in html
    assert html.index('id="root-cause"') < html.index('id="cause"') < html.index("<pre>")
    rows = _summary_rows(PLAN, SUMMARY, "/j")
    assert ("cause", f"missing_file: {CAUSE['evidence']}") in rows and ("hint", CAUSE["hint"]) in rows


def test_no_cause_no_paragraph():
    for rc in (
        dict(SUMMARY["root_cause"], cause=None),
        {k: v for k, v in SUMMARY["root_cause"].items() if k != "cause"},
    ):
        summary = dict(SUMMARY, root_cause=rc)
        assert 'id="cause"' not in "\n".join(_html_summary("/j", PLAN, summary))
        assert not [r for r in _summary_rows(PLAN, summary, "/j") if r[0] in ("cause", "hint")]
