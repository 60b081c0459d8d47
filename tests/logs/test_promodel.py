"""The metrics model (launcher.logs.promodel): the job's numbers from its events and metrics records."""

from __future__ import annotations

import math

from launcher.logs.promodel import JobIdentity, JobModel

ID = JobIdentity("job1", "ssh", "train.py", 2)


def started(rank, attempt, name=None):
    return {
        "kind": "started",
        "name": name or f"rank {rank}",
        "rank": rank,
        "attempt": attempt,
        "pid": 10 + (rank or 0),
    }


def exited(rank, attempt, rc):
    return {"kind": "exited", "name": f"rank {rank}", "rank": rank, "attempt": attempt, "returncode": rc}


def step(rank, attempt, g, t, loss, ms=None, rate=None):
    rec = {"kind": "step", "rank": rank, "attempt": attempt, "time": t, "step": g, "global_step": g, "loss": loss}
    if ms is not None:
        rec["step_time_ms"] = ms
    if rate is not None:
        rec["samples_per_s"] = rate
    return rec


def model(*events, metrics=()):
    m = JobModel(ID, causes=("oom", "unknown"))
    for e in events:
        m.add_event(e)
    for r in metrics:
        m.add_metric(r)
    return m


def test_before_the_first_event_the_job_is_starting_and_every_cause_counts_zero():
    s = model().sample(100.0)
    assert (s.state, s.started, s.attempt, s.restarts, s.ranks_running, s.hosts_excluded) == (
        "starting",
        None,
        0,
        0,
        0,
        0,
    )
    assert s.failures == {"oom": 0, "unknown": 0}
    assert s.ranks == () and s.samples_per_s is None


def test_a_running_attempt_counts_its_started_ranks_not_the_scheduler_and_not_exited_ones():
    m = model(
        {"kind": "job_start", "job_id": "job1", "time": 50.0},
        started(None, 0, "scheduler"),
        started(0, 0),
        started(1, 0),
        exited(1, 0, 0),
    )
    s = m.sample(60.0)
    assert (s.state, s.started, s.ranks_running) == ("running", 50.0, 1)


def test_a_restart_moves_to_the_next_attempt_counts_the_failure_by_cause_and_forgets_the_old_attempts_ranks():
    cause = {"name": "rank 1", "cause": {"kind": "oom", "evidence": "x", "hint": "y"}}
    m = model(
        {"kind": "job_start", "time": 50.0},
        started(0, 0),
        started(1, 0),
        exited(1, 0, -9),
        {"kind": "restart", "attempt": 1, "cause": cause, "env_attempt": 1},
        {"kind": "restart", "attempt": 2, "cause": None, "env_attempt": 2},
        started(0, 2),
        metrics=[step(0, 0, 7, 55.0, 0.5), step(1, 0, 7, 55.0, 0.5), step(0, 2, 2, 58.0, 0.9, ms=200.0, rate=160.0)],
    )
    s = m.sample(61.0)
    assert (s.attempt, s.restarts, s.ranks_running) == (2, 2, 1)
    assert s.failures == {"oom": 1, "unknown": 1}
    assert [(r.rank, r.step, r.loss, r.samples_per_s, r.step_seconds) for r in s.ranks] == [(0, 2, 0.9, 160.0, 0.2)]
    assert (s.ranks[0].last_step_time, s.ranks[0].seconds_since_step) == (58.0, 3.0)
    assert s.samples_per_s == 160.0


def test_the_end_gives_the_status_no_rank_running_and_a_failed_jobs_cause():
    m = model(
        {"kind": "job_start", "time": 1.0},
        started(0, 0),
        {"kind": "job_end", "status": "failed", "exit_code": 3, "cause": "oom"},
    )
    s = m.sample(2.0)
    assert (s.state, s.ranks_running, s.failures) == ("failed", 0, {"oom": 1, "unknown": 0})
    ok = model({"kind": "job_end", "status": "succeeded", "exit_code": 0, "cause": None}).sample(2.0)
    assert (ok.state, ok.failures) == ("succeeded", {"oom": 0, "unknown": 0})
    hung = model({"kind": "job_end", "status": "hung", "exit_code": 125}).sample(2.0)
    assert hung.failures == {"oom": 0, "unknown": 1}


def test_hosts_left_out_by_preflight_and_by_restarts_count_once_each():
    m = model(
        {"kind": "preflight", "excluded": [{"host": "h2", "reason": "slow", "by": "preflight", "attempt": 0}]},
        {"kind": "host_excluded", "host": "h3", "reason": "2 failures", "by": "restart", "attempt": 2, "moves": ""},
        {"kind": "host_excluded", "host": "h2", "reason": "lost", "by": "restart", "attempt": 3, "moves": ""},
    )
    assert m.sample(0.0).hosts_excluded == 2


def test_each_checkpoint_a_rank_could_not_write_counts_once_and_is_no_failure():
    m = model(*({"kind": "ckpt_failed", "rank": r, "attempt": 0, "why": "disk full"} for r in (1, 1, 0)))
    s = m.sample(0.0)
    assert (s.ckpt_failures, s.restarts, s.failures) == (3, 0, {"oom": 0, "unknown": 0})
    assert model().sample(0.0).ckpt_failures == 0


def test_a_rank_well_above_the_median_step_time_is_a_straggler_and_a_nan_loss_stays_nan():
    m = model(
        started(0, 0),
        started(1, 0),
        started(2, 0),
        metrics=[
            step(0, 0, 5, 10.0, 1.0, ms=100.0),
            step(1, 0, 5, 10.0, 1.0, ms=100.0),
            step(2, 0, 4, 10.0, 1.0, ms=200.0),
            {"kind": "step", "rank": 0, "attempt": 0, "time": 11.0, "event": "nonfinite_loss", "loss_text": "nan"},
        ],
    )
    s = m.sample(12.0)
    assert [r.straggler for r in s.ranks] == [False, False, True]
    assert math.isnan(s.ranks[0].loss)


def test_a_rank_the_straggler_watch_names_is_a_straggler_until_it_is_cleared():
    """In data parallel every rank steps at the slowest's pace: the watch's ``straggler`` event
    (docs/long-jobs.md) names the rank that the step times cannot."""
    same = [step(r, 0, 5, 10.0, 1.0, ms=100.0) for r in (0, 1, 2)]
    named = {"kind": "straggler", "rank": 1, "host": "h2", "attempt": 0, "cleared": False, "time": 9.0}
    m = model(started(0, 0), started(1, 0), started(2, 0), named, metrics=same)
    assert [r.straggler for r in m.sample(12.0).ranks] == [False, True, False]
    m.add_event(dict(named, cleared=True, time=11.0))
    assert [r.straggler for r in m.sample(12.0).ranks] == [False, False, False]
    m.add_event(dict(named, attempt=-1))  # an earlier attempt's rank 1 is not this one
    assert [r.straggler for r in m.sample(12.0).ranks] == [False, False, False]


def test_malformed_records_are_ignored():
    m = model(
        {"kind": "started", "rank": "0", "attempt": "x"},
        {"kind": "restart"},
        {"kind": "job_end", "status": 3},
        {"nothing": True},
        metrics=[{"rank": "a"}, {"kind": "step"}],
    )
    s = m.sample(1.0)
    assert (s.state, s.restarts, s.failures, s.ranks) == ("starting", 1, {"oom": 0, "unknown": 1}, ())
