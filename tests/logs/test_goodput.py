"""Goodput accounting (launcher/logs/goodput.py): hand-built jobs whose every span is known, and
the rule that the parts add up to the elapsed time over many generated event sequences."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from launcher.logs.goodput import KINDS, LABELS, PRODUCTIVE, Goodput, account
from tests.harness.hypo import examples


def ev(t, kind, **fields):
    return dict(fields, time=t, kind=kind)


def step(t, g, attempt=0, rank=0):
    return {"time": t, "kind": "step", "global_step": g, "attempt": attempt, "rank": rank, "loss": 1.0 / (g + 1)}


def spans(g):
    return [(s.kind, s.start, s.end, s.attempt) for s in g.spans]


def bad(g, **want):
    """``badput_s`` with every other kind 0."""
    return {k: pytest.approx(want.get(k, 0.0)) for k in KINDS}


def test_a_job_without_faults_is_start_up_training_and_its_end():
    events = [ev(100, "job_start", job_id="j"), ev(100.1, "started", name="rank 0", attempt=0), ev(105, "job_end")]
    records = [step(102, 1), step(103, 2), step(104, 3), step(104.2, 3, rank=1)]
    g = account(events, records)
    # the last step ends when the last rank logged it (rank 1, at 104.2)
    assert g.elapsed_s == pytest.approx(5.0) and g.productive_s == pytest.approx(2.2)
    assert g.badput_s == bad(g, startup=2.0, finish=0.8)
    assert g.ratio == pytest.approx(0.44) and not g.running and g.has_steps
    assert spans(g) == [("startup", 100, 102, 0), (PRODUCTIVE, 102, 104.2, 0), ("finish", 104.2, 105, 0)]


def restarted_job():
    """Rank 1 dies at 5.5 after step 4; attempt 1 resumes from step 2 and trains 3..6."""
    events = [
        ev(0, "job_start", job_id="j"),
        ev(0.5, "started", name="rank 0", attempt=0),
        ev(5.5, "exited", name="rank 1", rank=1, host="h1", returncode=-9, attempt=0),
        ev(5.6, "failure", name="rank 1", host="h1", returncode=-9),
        ev(5.6, "teardown", names=["rank 0"]),
        ev(5.7, "exited", name="rank 0", rank=0, host="h0", returncode=-15, attempt=0),
        ev(6.0, "restart", attempt=1, cause=None, env_attempt=1),
        ev(6.2, "started", name="rank 0", attempt=1),
        ev(12.0, "job_end", status="succeeded", exit_code=0),
    ]
    records = [step(t, g) for t, g in ((2, 1), (3, 2), (4, 3), (5, 4))]
    records += [step(t, g, attempt=1) for t, g in ((8, 3), (9, 4), (10, 5), (11, 6))]
    return events, records


def test_a_restarted_job_splits_into_every_phase_of_its_restart():
    g = account(*restarted_job())
    assert spans(g) == [
        ("startup", 0, 2, 0),
        (PRODUCTIVE, 2, 5.5, 0),
        ("detect", 5.5, 5.6, 0),
        ("teardown", 5.6, 6.0, 0),
        ("restart", 6.0, 8, 1),
        ("retrain", 8, 10, 1),
        (PRODUCTIVE, 10, 11, 1),
        ("finish", 11, 12.0, 1),
    ]
    assert g.badput_s == bad(g, startup=2, detect=0.1, teardown=0.4, restart=2, retrain=2, finish=1)
    assert g.productive_s == pytest.approx(4.5) and g.elapsed_s == pytest.approx(12.0)


def test_a_hang_is_at_fault_from_the_last_step_and_noticed_at_its_limit():
    events = [
        ev(0, "job_start"),
        ev(13, "hung", message="hung", hang={"kind": "no_progress", "idle_s": 10.0}),
        ev(13, "teardown", names=["rank 0"]),
        ev(14, "restart", attempt=1, cause=None, env_attempt=1),
        ev(20, "job_end"),
    ]
    records = [step(2, 1), step(3, 2), step(16, 3, attempt=1), step(17, 4, attempt=1)]
    g = account(events, records)
    assert g.badput_s == bad(g, startup=2, detect=10, teardown=1, restart=2, finish=3)
    assert g.productive_s == pytest.approx(2.0)


def test_a_hang_before_the_first_step_counts_its_silence_as_detection():
    events = [ev(0, "job_start"), ev(12, "hung", message="m", hang={"idle_s": 10.0}), ev(13, "job_end")]
    g = account(events, [])
    assert g.badput_s == bad(g, startup=2, detect=10, teardown=1)
    assert g.productive_s == 0.0 and g.ratio == 0.0 and not g.has_steps


def test_a_running_job_is_productive_up_to_now_and_says_it_runs():
    events = [ev(0, "job_start")]
    g = account(events, [step(2, 1), step(3, 2)], now=10.0)
    assert g.running and g.elapsed_s == pytest.approx(10.0)
    assert g.productive_s == pytest.approx(8.0) and g.badput_s == bad(g, startup=2)


def test_a_stop_signal_is_planned_not_a_fault():
    events = [
        ev(0, "job_start"),
        ev(6, "interrupted", signal=15),
        ev(6, "teardown", names=["rank 0"]),
        ev(7, "job_end"),
    ]
    g = account(events, [step(2, 1), step(5, 2)])
    assert g.badput_s == bad(g, startup=2, planned=1)
    assert g.productive_s == pytest.approx(4.0)


def test_a_planned_restart_is_planned_from_its_event_not_a_faults_teardown():
    # --straggler replace / --grow-at-checkpoint: mslaunch ends a healthy attempt itself; the
    # ranks save at their step's end (step 5 at 6.5), the next attempt resumes there: the stop and
    # the restart after it are both planned
    events = [
        ev(0, "job_start", job_id="j"),
        ev(6, "planned_restart", reason="leaving out h1: ..."),
        ev(6, "teardown", names=["scheduler", "rank 0", "rank 1"]),
        ev(6.6, "exited", name="rank 0", rank=0, host="h0", returncode=-15, attempt=0),
        ev(7.0, "restart", attempt=1, cause=None, env_attempt=1),
        ev(12.0, "job_end", status="succeeded", exit_code=0),
    ]
    records = [step(t, g) for t, g in ((2, 1), (3, 2), (4, 3), (5, 4), (6.5, 5))]
    records += [step(t, g, attempt=1) for t, g in ((9, 6), (10, 7))]
    g = account(events, records)
    assert g.badput_s == bad(g, startup=2, planned=3, finish=2), spans(g)
    assert g.productive_s == pytest.approx(5.0)


def test_an_attempt_that_could_not_start_is_a_restart_then_its_teardown():
    events = [
        ev(0, "job_start"),
        ev(3, "exited", name="rank 0", returncode=1, attempt=0),
        ev(3.1, "failure", name="rank 0", host="h", returncode=1),
        ev(4, "restart", attempt=1, cause=None, env_attempt=1),
        ev(6, "teardown", names=["scheduler"]),  # attempt 1 could not start: no failure event
        ev(7, "restart", attempt=2, cause=None, env_attempt=2),
        ev(12, "job_end"),
    ]
    records = [step(2, 1), step(9, 1, attempt=2), step(10, 2, attempt=2)]
    g = account(events, records)
    assert g.badput_s == bad(g, startup=2, detect=0.1, teardown=0.9 + 1, restart=2 + 2, retrain=1, finish=2)
    assert g.productive_s == pytest.approx(1.0)  # step 1 of attempt 0; attempt 2 trains step 2 last


def test_the_preflight_check_is_part_of_the_start_up():
    events = [ev(10, "preflight", mode="exclude", seconds=4.0), ev(10.5, "job_start"), ev(20, "job_end")]
    g = account(events, [step(12, 1), step(19, 2)])
    assert g.started == pytest.approx(6.0) and g.badput_s["startup"] == pytest.approx(6.0)


def test_a_job_from_before_events_counts_from_its_first_step_record():
    g = account([], [step(5, 1), step(6, 2)], now=8.0)
    assert g.elapsed_s == pytest.approx(3.0) and g.productive_s == pytest.approx(3.0)


def test_an_attempt_number_out_of_all_proportion_costs_nothing():
    """A damaged events.jsonl naming attempt 10**12: the attempts the files name, not a range up to it."""
    events = [ev(0, "job_start"), ev(4, "restart", attempt=10**12, cause=None, env_attempt=1), ev(9, "job_end")]
    g = account(events, [step(2, 1), step(6, 2, attempt=10**12)])
    assert [(s.kind, s.attempt) for s in g.spans] == [
        ("startup", 0),
        (PRODUCTIVE, 0),
        ("restart", 10**12),
        ("finish", 10**12),
    ]
    assert g.badput_s == bad(g, startup=2, restart=2, finish=3) and g.productive_s == pytest.approx(2)


def test_its_json_reads_back():
    g = account(*restarted_job())
    data = g.to_json()
    assert list(data["badput_s"]) == list(KINDS)
    back = Goodput.from_json(data)
    assert back is not None and back.to_json() == data
    assert Goodput.from_json({"elapsed_s": "x"}) is None and Goodput.from_json(None) is None


def test_the_line_of_a_fresh_count_is_the_line_of_its_json():
    """The report counts afresh, ``status`` reads summary.json (seconds rounded to the ms): figures
    at a rounding edge (0.04996 s is 0.0 s, its 0.05 in JSON 0.1 s) still give one line."""
    from launcher.logs.goodput import goodput_line

    bad = {k: 0.0 for k in KINDS}
    bad[KINDS[0]], bad[KINDS[1]] = 0.04996, 1.24951
    g = Goodput(2.34947, 1.04998, bad, 1.04998 / 2.34947, 100.0, 102.34947, False, True)
    line = goodput_line(g)
    assert line == goodput_line(Goodput.from_json(g.to_json()))
    assert "(1.1 s productive)" in line and f"{LABELS[KINDS[0]]} 0.1 s" in line, line


# ---------------------------------------------------------------------------- the rule that it adds up

STOPS = ("failure", "hung", "interrupted", "cluster_stop", "timeout", None)


@st.composite
def jobs(draw):
    """A plausible job: attempts that train, fail, hang or stop in random ways (times drawn, some
    records late or early), or, now and then, events and records in no order at all."""
    if draw(st.booleans()) and draw(st.booleans()):
        t = st.floats(-50, 500, allow_nan=False)
        kinds = st.sampled_from(
            ["job_start", "job_end", "started", "exited", "failure", "hung", "teardown", "restart", "interrupted"]
        )
        events = draw(
            st.lists(
                st.builds(
                    lambda time, kind, k, rc: {"time": time, "kind": kind, "attempt": k, "returncode": rc},
                    t,
                    kinds,
                    st.integers(0, 4),
                    st.integers(-9, 3),
                ),
                max_size=15,
            )
        )
        records = draw(st.lists(st.builds(step, t, st.integers(0, 30), st.integers(0, 4)), max_size=30))
        return events, records, draw(st.one_of(st.none(), t))
    now = 0.0
    events = [ev(now, "job_start")]
    records = []
    best = 0
    attempts = draw(st.integers(1, 5))
    dt = st.floats(0, 20, allow_nan=False)
    for k in range(attempts):
        if k:
            now += draw(dt)
            events.append(ev(now, "restart", attempt=k, cause=None, env_attempt=k))
        now += draw(dt)
        events.append(ev(now, "started", name="rank 0", attempt=k))
        g = draw(st.integers(0, best)) if k else 0
        for _ in range(draw(st.integers(0, 6))):
            g += 1
            now += draw(dt)
            for rank in range(2):
                records.append(step(now + draw(st.floats(-1, 1, allow_nan=False)), g, attempt=k, rank=rank))
        best = max(best, g)
        stop = draw(st.sampled_from(STOPS)) if k + 1 < attempts else draw(st.sampled_from(STOPS))
        now += draw(dt)
        if stop == "failure":
            events.append(ev(now, "exited", name="rank 1", returncode=-9, attempt=k))
            now += draw(dt)
            events.append(ev(now, "failure", name="rank 1", returncode=-9))
        elif stop == "hung":
            events.append(ev(now, "hung", message="m", hang={"idle_s": draw(dt)}))
        elif stop is not None:
            events.append(ev(now, stop))
        now += draw(dt)
        events.append(ev(now, "teardown", names=["rank 0"]))
    running = draw(st.booleans())
    if not running:
        events.append(ev(now + draw(dt), "job_end"))
    order = draw(st.permutations(range(len(events))))
    return [events[i] for i in order], records, now + draw(dt) if running else None


@settings(max_examples=examples(300), deadline=None)
@given(jobs())
def test_productive_and_badput_add_up_to_the_elapsed_time(job):
    events, records, now = job
    g = account(events, records, now=now)
    assert list(g.badput_s) == list(KINDS)
    assert all(v >= 0 for v in g.badput_s.values()) and g.productive_s >= 0 and g.elapsed_s >= 0
    assert math.isclose(g.productive_s + sum(g.badput_s.values()), g.elapsed_s, rel_tol=1e-9, abs_tol=1e-6)
    assert 0.0 <= g.ratio <= 1.0 + 1e-12
    # The spans are the time line: in order, touching, from the start to the end.
    at = g.started
    for s in g.spans:
        assert math.isclose(s.start, at, abs_tol=1e-9) and s.end > s.start
        at = s.end
    assert math.isclose(at, g.ended, abs_tol=1e-9) or not g.spans and g.elapsed_s == 0
