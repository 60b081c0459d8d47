"""The goodput bench's view of the machine's speed, and ETTR within the faulty run."""

from __future__ import annotations

import json
import os

import pytest

from tests.harness.steppace import ettr_within, median_step_ms


def _job(folder, rows):
    job = str(folder)
    with open(os.path.join(job, "metrics.jsonl"), "w", encoding="utf-8") as fh:
        for r in rows:
            fh.write((r if isinstance(r, str) else json.dumps(r)) + "\n")
    return job


def test_the_median_step_of_every_attempt_and_rank_that_has_a_time(tmp_path):
    rows = [
        {"kind": "step", "rank": 0, "attempt": 0, "global_step": 1},  # an attempt's first step: no time
        {"kind": "step", "rank": 0, "attempt": 0, "global_step": 2, "step_time_ms": 100},
        {"kind": "step", "rank": 1, "attempt": 0, "global_step": 2, "step_time_ms": 300},
        {"kind": "step", "rank": 0, "attempt": 1, "global_step": 3, "step_time_ms": 200},
        {"kind": "info", "ckpt_ms": 9999},
        {"kind": "step", "step_time_ms": True},
        "not json",
    ]
    assert median_step_ms(_job(tmp_path, rows)) == 200
    assert median_step_ms(_job(tmp_path, ["{}"])) is None
    assert median_step_ms(str(tmp_path / "missing")) is None


def test_ettr_within_is_the_share_of_the_wall_not_lost_to_faults():
    assert ettr_within(100.0, [5.0, None, 15.0]) == pytest.approx(0.8)
    assert ettr_within(100.0, []) == 1.0
