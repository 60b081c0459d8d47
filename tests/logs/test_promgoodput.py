"""The goodput gauges (launcher.logs.promgoodput): read incrementally from a job's files, with
only each step's first record and each attempt's newest kept, they give the account that
:func:`launcher.logs.goodput.account` gives over every record."""

from __future__ import annotations

import json
import random

import pytest
from prometheus_client.core import Metric

from launcher.logs.goodput import KINDS, account
from launcher.logs.metricsfile import EVENTS_FILE, METRICS_FILE
from launcher.logs.promgoodput import GoodputFamilies
from launcher.logs.promodel import JobIdentity, JobSample


def _sample(now: float) -> JobSample:
    ident = JobIdentity(job_id="j1", backend="local", script="train.py", ranks_planned=2)
    return JobSample(ident, now, "running", 0.0, 1, 1, {}, 2, 0)


def _values(families: list) -> dict:
    out = {}
    for fam in families:
        assert isinstance(fam, Metric)
        for s in fam.samples:
            assert s.labels["job_id"] == "j1"
            out[(s.name, s.labels.get("kind"))] = s.value
    return out


def _job(rng: random.Random):
    """A 2-rank job restarted once: events, and step records of both ranks (out of order)."""
    events = [
        {"time": 0.0, "kind": "job_start"},
        {"time": 0.5, "kind": "started", "attempt": 0},
        {"time": 20.0, "kind": "failure", "attempt": 0, "name": "rank 1"},
        {"time": 21.0, "kind": "teardown", "attempt": 0},
        {"time": 22.0, "kind": "restart", "attempt": 1, "resume_step": 5},
        {"time": 22.5, "kind": "started", "attempt": 1},
    ]
    records = []
    for rank in (0, 1):
        for step in range(1, 10):
            records.append(
                {"kind": "step", "time": 2.0 + 2 * step + rng.random() / 10, "global_step": step, "rank": rank}
            )
        for step in range(6, 16):
            t = 25.0 + 1.5 * (step - 6) + rng.random() / 10
            records.append({"kind": "step", "time": t, "global_step": step, "rank": rank, "attempt": 1})
    records.append({"kind": "throughput", "time": 30.0, "rank": 0})
    rng.shuffle(records)
    return events, records


@pytest.mark.parametrize("seed", range(5))
def test_the_gauges_give_the_account_of_every_record_read_in_pieces(tmp_path, seed) -> None:
    rng = random.Random(seed)
    events, records = _job(rng)
    feed = GoodputFamilies(str(tmp_path))
    cut_e, cut_r = rng.randrange(len(events)), rng.randrange(len(records))
    for part_e, part_r in ((events[:cut_e], records[:cut_r]), (events[cut_e:], records[cut_r:])):
        with open(tmp_path / EVENTS_FILE, "a") as fh:
            fh.writelines(json.dumps(e) + "\n" for e in part_e)
        with open(tmp_path / METRICS_FILE, "a") as fh:
            fh.writelines(json.dumps(r) + "\n" for r in part_r)
        got = _values(list(feed(_sample(50.0))))
    want = account(events, records, now=50.0)
    assert want.badput_s["restart"] > 0 and want.productive_s > 0  # the job has both
    assert got[("mslaunch_job_elapsed_seconds", None)] == pytest.approx(want.elapsed_s)
    assert got[("mslaunch_job_productive_seconds", None)] == pytest.approx(want.productive_s)
    for kind in KINDS:
        assert got[("mslaunch_job_badput_seconds", kind)] == pytest.approx(want.badput_s[kind]), kind
    assert got[("mslaunch_job_goodput_ratio", None)] == pytest.approx(want.ratio)


def test_no_ratio_before_the_first_step(tmp_path) -> None:
    (tmp_path / EVENTS_FILE).write_text(json.dumps({"time": 0.0, "kind": "job_start"}) + "\n")
    got = _values(list(GoodputFamilies(str(tmp_path))(_sample(5.0))))
    assert ("mslaunch_job_goodput_ratio", None) not in got
    assert got[("mslaunch_job_elapsed_seconds", None)] == pytest.approx(5.0)
    assert got[("mslaunch_job_productive_seconds", None)] == 0
