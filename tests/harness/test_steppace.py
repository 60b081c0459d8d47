"""The goodput bench's pace factor: steps before the first fault, the same in both runs."""

from __future__ import annotations

import json
import os

from tests.harness.steppace import pace_factor, step_times_ms


def _job(folder, name, rows):
    job = os.path.join(str(folder), name)
    os.makedirs(job)
    with open(os.path.join(job, "metrics.jsonl"), "w", encoding="utf-8") as fh:
        for r in rows:
            fh.write((r if isinstance(r, str) else json.dumps(r)) + "\n")
    return job


def _steps(ms, ranks=(0, 1), attempt=0, start=1):
    rows = []
    for i, t in enumerate(ms):
        for rank in ranks:
            row = {"rank": rank, "attempt": attempt, "kind": "step", "global_step": start + i}
            if start + i > 1:
                row["step_time_ms"] = t
            rows.append(row)
    return rows


def test_only_attempt_0s_steps_in_range_with_a_time_count(tmp_path):
    rows = _steps([9999, 100, 110, 120, 130]) + _steps([5000, 5000], attempt=1, start=3)
    rows += ["not json", '{"kind": "info", "ckpt_ms": 300}', {"kind": "step", "global_step": 3}]
    job = _job(tmp_path, "a", rows)
    assert sorted(step_times_ms(job, 2, 4)) == [100, 100, 110, 110, 120, 120]
    assert step_times_ms(os.path.join(str(tmp_path), "missing"), 2, 4) == []


def test_the_factor_is_the_ratio_of_the_medians_and_none_without_enough_steps(tmp_path):
    free = _job(tmp_path, "free", _steps([0, 100, 100, 100, 100, 900]))
    faulty = _job(tmp_path, "faulty", _steps([0, 120, 120, 120, 120, 120]))
    assert abs(pace_factor(faulty, free, 5) - 1.2) < 1e-9
    assert abs(pace_factor(free, faulty, 5) - 1 / 1.2) < 1e-9
    # one slow outlier step moves the median less than the mean
    assert abs(pace_factor(faulty, free, 6) - 1.2) < 1e-9
    assert pace_factor(faulty, free, 2, least=3) is None  # one step of each run's two ranks
