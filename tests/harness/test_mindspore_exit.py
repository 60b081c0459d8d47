"""``crashed_after_leaving``: the one failure an end-to-end test of MindSpore's full exit runs its
job again for (tests/harness/mindspore.py): the job's root cause, as mslaunch wrote it in
summary.json, is a native crash of a rank after it left the cluster. Which crash that is, is the
classifier's (tests/logs/test_causes.py)."""

from __future__ import annotations

import json

import pytest

from tests.harness.mindspore import crashed_after_leaving

LEFT = (
    "SIGSEGV; after it left the cluster (the scheduler's log: Node 1 has unregistered.); the log ends: [INFO] "
    "DISTRIBUTED(26179,7fde7bfff6c0,python):... Start] Event base dispatch success!"
)


def _job(tmp_path, kind, evidence, name="rank 1"):
    cause = {"kind": kind, "evidence": evidence, "hint": "..."}
    summary = {"status": "failed", "root_cause": {"name": name, "rank": 1, "cause": cause}}
    (tmp_path / "summary.json").write_text(json.dumps(summary))
    return str(tmp_path)


def test_a_native_crash_after_the_rank_left_the_cluster_is_the_cleanups(tmp_path) -> None:
    why = crashed_after_leaving(_job(tmp_path, "native_crash", LEFT))
    assert why == "rank 1: SIGSEGV; after it left the cluster (MindSpore's exit cleanup)"


@pytest.mark.parametrize(
    "kind, evidence",
    [
        ("native_crash", "SIGSEGV; the log ends: epoch: 1 step: 3, loss is 2.1"),  # while it ran
        ("python_exception", "RuntimeError: after it left the cluster"),  # another kind, whatever it says
        ("unknown", LEFT),
    ],
)
def test_any_other_root_cause_is_not(tmp_path, kind, evidence) -> None:
    assert crashed_after_leaving(_job(tmp_path, kind, evidence)) is None


def test_a_job_without_a_summary_or_a_root_cause_is_not(tmp_path) -> None:
    assert crashed_after_leaving(str(tmp_path)) is None
    (tmp_path / "summary.json").write_text(json.dumps({"status": "succeeded", "root_cause": None}))
    assert crashed_after_leaving(str(tmp_path)) is None
    (tmp_path / "summary.json").write_text("{not json")
    assert crashed_after_leaving(str(tmp_path)) is None
