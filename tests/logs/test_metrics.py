"""Metric parsing (table over real-format lines), records for metrics.jsonl, and top's snapshot."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from launcher.logs.metrics import Metric, parse_line
from launcher.logs.metricsfile import JsonlTail, LogMetrics
from launcher.logs.progress import Progress, RankDeriver, snapshot
from tests.harness.hypo import examples

MF_LINE = (
    "2025-04-07 15:34:27,308 - [mindformers/core/callback/callback.py:529] - INFO - { Epoch:[  1/  2], step:[    2/   "
    "19], "
    "loss: 10.649, per_step_time: 103328ms, lr: 0.0, overflow cond: False, loss_scale: 1.0, global_norm: [1 31049], "
    "train_throughput_per_npu: 2.896T"
)
MF_LINE_MEAN = (
    " mindformers[callback.py:305] - INFO - { Epoch:[  1/  1], step:[   92/25880], loss:[9.902/9.950], per_step_time: "
    "2068ms, "
    "lr: 9.92268e-06, overflow cond: False, loss_scale: 262144.0"
)

# (line, expected metric) — the formats as MindSpore, MindFormers and the reference trainer print them.
TABLE = [
    (
        "epoch: 1 step: 40, loss is 0.09236499",
        Metric(kind="step", source="lossmonitor", epoch=1, step=40, step_in_epoch=True, loss=0.09236499),
    ),
    (
        "epoch: 3 step: 1, loss is 2.3025854",
        Metric(kind="step", source="lossmonitor", epoch=3, step=1, step_in_epoch=True, loss=2.3025854),
    ),
    (
        "[rank 1] epoch: 2 step: 7, loss is 1.5e-03",
        Metric(kind="step", source="lossmonitor", epoch=2, step=7, step_in_epoch=True, loss=0.0015),
    ),
    (
        "epoch: 1 step: 5, loss is nan",
        Metric(
            kind="step",
            source="lossmonitor",
            epoch=1,
            step=5,
            step_in_epoch=True,
            loss_text="nan",
            event="nonfinite_loss",
        ),
    ),
    (
        "ValueError: In epoch: 1 step: 6, loss is NAN or INF, training process cannot continue, terminating training.",
        Metric(
            kind="step",
            source="lossmonitor",
            epoch=1,
            step=6,
            step_in_epoch=True,
            loss_text="NAN or INF",
            event="nonfinite_loss",
        ),
    ),
    (
        "Train epoch time: 5312.412 ms, per step time: 132.810 ms",
        Metric(kind="epoch", source="timemonitor", step_time_ms=132.81),
    ),
    (
        " epoch time: 900.000 ms, per step time: 90.000 ms (data time: 1.250 ms)",
        Metric(kind="epoch", source="timemonitor", step_time_ms=90.0),
    ),
    (
        MF_LINE,
        Metric(
            kind="step",
            source="mindformers",
            epoch=1,
            epochs=2,
            step=2,
            steps_per_epoch=19,
            step_in_epoch=True,
            loss=10.649,
            step_time_ms=103328.0,
        ),
    ),
    (
        MF_LINE_MEAN,
        Metric(
            kind="step",
            source="mindformers",
            epoch=1,
            epochs=1,
            step=92,
            steps_per_epoch=25880,
            step_in_epoch=True,
            loss=9.902,
            step_time_ms=2068.0,
        ),
    ),
    (
        "- INFO -    0.0% |                                                  | 0.00600 samples/s/p  25 days, 2:07:47 }",
        Metric(kind="step", source="mindformers", samples_per_s=0.006),
    ),
    (
        "Eval result: epoch 2, metrics: {'accuracy': 0.9125, 'loss': 0.31}",
        Metric(kind="eval", source="eval", epoch=2, eval={"accuracy": 0.9125, "loss": 0.31}),
    ),
    ("accuracy: 0.9760", Metric(kind="eval", source="trainer", eval={"accuracy": 0.976})),
    (
        "epoch 1 throughput: 18.8 img/s per rank, 37.5 img/s total (2 ranks)",
        Metric(kind="epoch", source="trainer", epoch=1, samples_per_s=18.8),
    ),
    (
        "data: synthetic CIFAR-10 (1000 records); rank 0 of 2: 15 batches of 32 per pass",
        Metric(kind="info", source="trainer", batch_size=32),
    ),
    (
        "epoch: 1 step: 3. Invalid loss nan, terminating training.",
        Metric(
            kind="step", source="trainer", epoch=1, step=3, step_in_epoch=True, loss_text="nan", event="nonfinite_loss"
        ),
    ),
    (
        'MSLAUNCH_METRIC {"step": 12, "loss": 0.42, "step_time_ms": 130.5, "samples_per_s": 245.2}',
        Metric(kind="step", source="mslaunch", step=12, loss=0.42, step_time_ms=130.5, samples_per_s=245.2),
    ),
    (
        'MSLAUNCH_METRIC {"epoch": 2, "step": 3, "steps_per_epoch": 10, "loss": "inf"}',
        Metric(
            kind="step",
            source="mslaunch",
            epoch=2,
            step=3,
            steps_per_epoch=10,
            step_in_epoch=True,
            loss_text="inf",
            event="nonfinite_loss",
        ),
    ),
    (
        'MSLAUNCH_METRIC {"batch_size": 32, "epochs": 1, "steps_per_epoch": 60}',
        Metric(kind="info", source="mslaunch", batch_size=32, epochs=1, steps_per_epoch=60),
    ),
    (
        'MSLAUNCH_METRIC {"eval": {"top1": 0.7, "name": "x"}}',
        Metric(kind="eval", source="mslaunch", eval={"top1": 0.7}),
    ),
    (
        'MSLAUNCH_METRIC {"ckpt_failed": "rank 1:  [Errno 28]\\nNo space"}',
        Metric(kind="info", source="mslaunch", event="ckpt_failed", ckpt_failed="rank 1: [Errno 28] No space"),
    ),
    ('MSLAUNCH_METRIC {"ckpt_failed": " "}', None),
    ('MSLAUNCH_METRIC {"ckpt_failed": 3}', None),
    ('MSLAUNCH_METRIC {"step": true, "loss": [1]}', None),
    ("MSLAUNCH_METRIC not json", None),
    ("MSLAUNCH_METRIC [1, 2]", None),
    ("epoch: 1 step: 2, loss is", None),
    ("params: 23528522", None),
    ("checkpoint: /tmp/ckpt_0/resnet50-1_40.ckpt", None),
    ("", None),
]


@pytest.mark.parametrize("line,expected", TABLE, ids=[t[0][:40] for t in TABLE])
def test_parse_line_table(line, expected):
    assert parse_line(line) == expected


@settings(max_examples=examples(400), deadline=None)
@given(st.text(max_size=300))
def test_parse_line_never_raises_on_any_text(text):
    m = parse_line(text)
    assert m is None or isinstance(m, Metric)


@settings(max_examples=examples(300), deadline=None)
@given(st.sampled_from([t[0] for t in TABLE]), st.text(max_size=40), st.integers(min_value=0, max_value=80))
def test_parse_line_never_raises_on_mutated_metric_lines(line, junk, cut):
    for text in (line[:cut] + junk, junk + line, line.replace("1", junk[:5]), "MSLAUNCH_METRIC " + junk):
        m = parse_line(text)
        assert m is None or isinstance(m, Metric)


def test_huge_numbers_are_not_metrics_and_do_not_raise():
    assert parse_line('MSLAUNCH_METRIC {"loss": ' + "9" * 400 + "}") is None
    assert parse_line("Eval result: epoch 1, metrics: {'acc': " + "9" * 400 + "}") is None


def _feed(deriver, lines, when):
    return deriver.feed([m for m in map(parse_line, lines) if m is not None], when)


def test_global_step_runs_across_epochs_without_a_known_budget():
    d = RankDeriver(rank=1)
    recs = _feed(d, [f"epoch: 1 step: {s}, loss is 1.0" for s in (1, 2, 3)], 100.0)
    recs += _feed(d, [f"epoch: 2 step: {s}, loss is 0.5" for s in (1, 2)], 101.0)
    assert [r["global_step"] for r in recs] == [1, 2, 3, 4, 5]
    assert all(r["rank"] == 1 and r["attempt"] == 0 for r in recs)


def test_global_step_from_the_budget_after_a_resume():
    d = RankDeriver(rank=0)
    recs = _feed(
        d,
        ['MSLAUNCH_METRIC {"batch_size": 32, "epochs": 3, "steps_per_epoch": 10}', "epoch: 3 step: 2, loss is 0.5"],
        5.0,
    )
    assert recs[1]["global_step"] == 22 and recs[1]["total_steps"] == 30


def test_step_time_and_samples_are_derived_from_arrival_times():
    d = RankDeriver(rank=0)
    _feed(d, ["data: x; rank 0 of 2: 9 batches of 32 per pass", "epoch: 1 step: 1, loss is 2.0"], 10.0)
    recs = _feed(d, ["epoch: 1 step: 2, loss is 1.9", "epoch: 1 step: 3, loss is 1.8"], 11.0)  # two steps in 1 s
    assert [r["step_time_ms"] for r in recs] == [500.0, 500.0]
    assert [r["samples_per_s"] for r in recs] == [64.0, 64.0]
    recs = _feed(d, ["epoch: 1 step: 4, loss is 1.7"], 12.0)
    assert recs[0]["step_time_ms"] == pytest.approx(2000 / 3, rel=1e-3)  # over the whole window (3 steps in 2 s)


def test_printed_step_time_wins_over_the_derived_one():
    d = RankDeriver(rank=0)
    _feed(d, [MF_LINE.replace("step:[    2/", "step:[    1/")], 1.0)
    recs = _feed(d, [MF_LINE], 2.0)
    assert recs[0]["step_time_ms"] == 103328.0 and recs[0]["global_step"] == 2 and recs[0]["total_steps"] == 38


def test_nonfinite_loss_is_an_event_record():
    d = RankDeriver(rank=0)
    recs = _feed(d, ["epoch: 1 step: 5, loss is nan"], 1.0)
    assert recs[0]["event"] == "nonfinite_loss" and recs[0]["loss_text"] == "nan" and "loss" not in recs[0]
    json.dumps(recs[0], allow_nan=False)  # valid JSON: no NaN literal
    prog = Progress()
    prog.extend(recs)
    assert math.isnan(prog.ranks[0].loss)
    snap = snapshot("j", "running", 2.0, 1, {0: "h"}, prog, {0: 1.5})
    assert snap.rows[0].nonfinite_loss and snap.to_json()["ranks"][0]["loss"] is None


def test_a_checkpoint_not_written_is_an_event_record_with_its_reason():
    text = "x" * 2000
    recs = _feed(RankDeriver(rank=1, attempt=2), ['MSLAUNCH_METRIC {"ckpt_failed": "%s"}' % text], 1.0)
    assert [(r["rank"], r["attempt"], r["kind"], r["event"]) for r in recs] == [(1, 2, "info", "ckpt_failed")]
    assert recs[0]["ckpt_failed"] == "x" * 500  # kept short


def _progress(step_times):
    prog = Progress()
    for rank, ms in step_times.items():
        prog.add(
            {
                "rank": rank,
                "time": 1.0,
                "kind": "step",
                "global_step": 10,
                "total_steps": 100,
                "loss": 1.0,
                "step_time_ms": ms,
                "samples_per_s": 32000.0 / ms,
            }
        )
    return prog


def test_snapshot_flags_a_straggler_and_totals():
    prog = _progress({0: 100.0, 1: 110.0, 2: 105.0, 3: 600.0})
    snap = snapshot("j", "running", 50.0, 4, {r: f"h{r}" for r in range(4)}, prog, {r: 49.0 for r in range(4)})
    assert snap.stragglers == (3,)
    assert [r.straggler for r in snap.rows] == [False, False, False, True]
    assert snap.slowest_rank == 3 and snap.fastest_rank == 0
    assert snap.samples_per_s == pytest.approx(sum(32000.0 / ms for ms in (100.0, 110.0, 105.0, 600.0)))
    assert snap.eta_s == pytest.approx(90 * 0.6)  # the slowest rank's remaining steps
    assert [r.host for r in snap.rows] == ["h0", "h1", "h2", "h3"]


def test_snapshot_equal_ranks_have_no_straggler():
    snap = snapshot("j", "running", 50.0, 2, {}, _progress({0: 100.0, 1: 125.0}), {0: 49.0, 1: 49.0})
    assert snap.stragglers == () and snap.slowest_rank == 1


def test_snapshot_flags_a_silent_rank_and_waiting_ranks():
    prog = _progress({0: 100.0, 1: 100.0})
    snap = snapshot("j", "running", 100.0, 3, {}, prog, {0: 99.0, 1: 20.0}, silent_after=30.0)
    assert [r.state for r in snap.rows] == ["running", "silent", "waiting"]
    assert snap.silent == (1,)
    assert snap.rows[1].last_output_age == pytest.approx(80.0)


def test_snapshot_after_the_end_uses_the_summary():
    prog = _progress({0: 100.0, 1: 100.0})
    exits = {
        0: {"rank": 0, "exit_code": 0, "signal": None, "torn_down": False},
        1: {"rank": 1, "exit_code": 3, "signal": None, "torn_down": False},
    }
    snap = snapshot("j", "failed", 100.0, 2, {}, prog, {0: 1.0, 1: 1.0}, exits, silent_after=5.0)
    assert [r.state for r in snap.rows] == ["done", "failed"] and snap.silent == () and snap.eta_s is None


def test_progress_keeps_the_newest_attempt():
    prog = Progress()
    prog.add({"rank": 0, "attempt": 1, "kind": "step", "global_step": 2, "loss": 0.5})
    prog.add({"rank": 0, "attempt": 0, "kind": "step", "global_step": 9, "loss": 0.1})
    prog.add({"rank": "x"})
    assert prog.ranks[0].global_step == 2 and prog.ranks[0].loss == 0.5 and list(prog.ranks) == [0]


def test_log_metrics_reads_only_new_bytes_and_jsonl_tail_skips_partial_lines(tmp_path):
    log = tmp_path / "worker_0.log"
    log.write_bytes(b"epoch: 1 step: 1, loss is 2.0\nepoch: 1 step: 2, loss")
    clock = iter([1.0, 2.0, 3.0])
    src = LogMetrics(str(tmp_path), clock=lambda: next(clock))
    assert [r["step"] for r in src.poll()] == [1]
    with open(log, "ab") as fh:
        fh.write(b" is 1.0\n")
    recs = src.poll()
    assert [(r["step"], r["loss"], r["time"]) for r in recs] == [(2, 1.0, 2.0)]
    assert src.poll() == []
    out = tmp_path / "m.jsonl"
    out.write_bytes(b'{"rank": 0}\n{"rank": 1')
    tail = JsonlTail(str(out))
    assert tail.read() == [{"rank": 0}]
    with open(out, "ab") as fh:
        fh.write(b"}\nnot json\n")
    assert tail.read() == [{"rank": 1}]


def test_time_monitor_step_time_gives_samples_when_the_batch_is_known():
    d = RankDeriver(rank=0)
    recs = _feed(
        d, ['MSLAUNCH_METRIC {"batch_size": 16}', "Train epoch time: 2000.000 ms, per step time: 200.000 ms"], 1.0
    )
    assert recs[1]["kind"] == "epoch" and recs[1]["samples_per_s"] == 80.0


@pytest.mark.parametrize(
    "times, slowest, fastest",
    [
        ({0: 1005.0, 1: 1005.0}, None, None),  # equal ranks: no spread
        ({1: 1005.0}, None, None),  # one rank with step times (of two): nothing to compare
        ({0: 1005.2, 1: 1004.8, 2: 1005.4}, None, None),  # equal at the precision shown (whole ms)
        ({0: 100.0, 1: 125.0, 2: 100.0}, 1, 0),  # a spread: the lowest rank among equals is named
        ({0: 125.0, 1: 100.0, 2: 125.0}, 0, 1),
    ],
)
def test_snapshot_names_slowest_and_fastest_only_when_there_is_a_spread(times, slowest, fastest):
    snap = snapshot("j", "running", 50.0, 3, {}, _progress(times), {r: 49.0 for r in range(3)})
    assert (snap.slowest_rank, snap.fastest_rank) == (slowest, fastest)
    assert snap.to_json()["totals"]["slowest_rank"] == slowest and snap.stragglers == ()
