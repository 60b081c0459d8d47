"""Hang rules (pure, a fake clock): the policy flags, the tracker's limits, py-spy dumps and the culprit."""

from __future__ import annotations

import pytest

from launcher.errors import PlanError
from launcher.logs.hang import AUTO_FLOOR, STOPPED_LIMIT, HangPolicy, HangTracker, HangVerdict
from launcher.logs.hangreport import HangKind, HangRank, HangReport
from launcher.logs.stacks import (
    RankEvidence,
    collective_timeout,
    in_collective,
    innermost_python,
    judge_culprit,
    main_thread,
    parse_pyspy,
)


@pytest.mark.parametrize(
    "text,first,expected",
    [
        (None, None, HangPolicy("auto")),
        ("auto", "30", HangPolicy("auto", None, 30.0)),
        ("off", None, HangPolicy("off")),
        ("12.5", "off", HangPolicy("fixed", 12.5)),
        ("auto:5", None, HangPolicy("auto", None, None, 5.0)),
        (" AUTO: 2.5 ", "7", HangPolicy("auto", None, 7.0, 2.5)),
    ],
)
def test_policy_parse(text, first, expected):
    assert HangPolicy.parse(text, first) == expected


@pytest.mark.parametrize(
    "text,expected", [(None, STOPPED_LIMIT), ("2", 2.0), (" 0.5 ", 0.5), ("off", None), ("0", None), ("OFF", None)]
)
def test_stopped_timeout_parse_whatever_the_hang_mode(text, expected):
    for mode in (None, "off", "30", "auto:5"):
        policy = HangPolicy.parse(mode, None, text)
        assert policy.stopped == expected and policy.mode == HangPolicy.parse(mode).mode
    assert ("stopped" in HangPolicy.parse("auto", None, text).describe()) == (expected != STOPPED_LIMIT)


@pytest.mark.parametrize(
    "text,first,field",
    [
        ("soon", None, "--hang-timeout"),
        ("-3", None, "--hang-timeout"),
        ("auto", "nan", "--first-step-timeout"),
        ("inf", None, "--hang-timeout"),
        ("auto:0", None, "--hang-timeout"),
        ("auto:", None, "--hang-timeout"),
        ("auto:soon", None, "--hang-timeout"),
        ("auto", None, "--stopped-timeout"),
    ],
)
def test_policy_parse_rejects_bad_values_naming_the_flag(text, first, field):
    with pytest.raises(PlanError) as err:
        if field == "--stopped-timeout":
            for bad in ("soon", "-1", "nan", "inf"):
                with pytest.raises(PlanError) as err:
                    HangPolicy.parse(text, first, bad)
                assert err.value.field == field and bad in str(err.value)
            raise err.value
        HangPolicy.parse(text, first)
    assert err.value.field == field and field in str(err.value)


def _steps(tr, rank, steps, start, every, epoch=0):
    t = start
    for s in steps:
        tr.feed(0, rank, (epoch, s), t)
        t += every
    return t - every


def test_auto_is_armed_by_the_ranks_that_log_steps():
    tr = HangTracker(HangPolicy("auto"))
    tr.begin(0, [0, 1, 2], 0.0)
    for rank in (0, 1, 2):
        tr.feed(0, rank, None, 0.5)  # start-up lines on every rank
    assert tr.limit()[0] is None and "until a rank logs a step" in tr.limit()[1]
    assert tr.due(10_000.0) is None  # no step yet: not watched
    last = _steps(tr, 0, range(5), 1.0, 1.0)  # only rank 0 logs steps, then every rank stops
    limit, derived = tr.limit()
    assert limit == AUTO_FLOOR and "2 of 3 ranks log no steps" in derived
    assert tr.due(last + AUTO_FLOOR - 1) is None
    verdict = tr.due(last + AUTO_FLOOR + 1)
    assert verdict is not None and verdict.limit == AUTO_FLOOR and verdict.idle == pytest.approx(AUTO_FLOOR + 1)


def test_auto_a_rank_without_steps_that_keeps_printing_is_progress_and_not_the_culprit():
    tr = HangTracker(HangPolicy("auto"))
    tr.begin(0, [0, 1], 0.0)
    last_step = _steps(tr, 0, range(3), 1.0, 1.0)  # rank 0: steps until 3.0, then stuck
    t = last_step
    while t < last_step + 5 * AUTO_FLOOR:  # rank 1: a warning every 10 s, long past rank 0's limit
        t += 10.0
        tr.feed(0, 1, None, t)
        for probe in range(10):
            assert tr.due(t + probe) is None
    assert tr.due(t + AUTO_FLOOR - 1) is None
    verdict = tr.due(t + AUTO_FLOOR + 1)  # then rank 1 stops too
    assert verdict is not None and verdict.idle == pytest.approx(AUTO_FLOOR + 1)
    now = t + AUTO_FLOOR + 1
    evidence = [
        RankEvidence(w.rank, w.last_step, now - w.last_output_at) for w in tr.ranks()
    ]  # as the hang watch judges
    assert judge_culprit(evidence) is None  # rank 1 logs no steps: which of the two went quiet first is no evidence


def test_auto_with_every_rank_logging_steps_progresses_only_by_steps():
    tr = HangTracker(HangPolicy("auto"))
    tr.begin(0, [0, 1], 0.0)
    for step in range(4):
        tr.feed(0, 0, (0, step), 1.0 + step)
        tr.feed(0, 1, (0, step), 1.5 + step)
    assert "log no steps" not in tr.limit()[1]
    for t in range(5, 200, 5):  # both stuck, printing warnings: not progress for ranks that log steps
        tr.feed(0, 0, None, float(t))
        tr.feed(0, 1, None, float(t))
    assert tr.due(4.5 + AUTO_FLOOR - 1) is None
    verdict = tr.due(4.5 + AUTO_FLOOR + 1)
    assert verdict is not None and verdict.limit == AUTO_FLOOR


def test_auto_floor_from_the_flag():
    tr = HangTracker(HangPolicy.parse("auto:5"))
    tr.begin(0, [0, 1], 0.0)
    last = _steps(tr, 0, range(3), 1.0, 0.5)  # rank 0 only; rank 1 printed nothing
    limit, derived = tr.limit()
    assert limit == 5.0 and derived.startswith("auto: the 5 s floor") and "1 of 2 ranks log no steps" in derived
    assert tr.due(last + 4.9) is None and tr.due(last + 5.1) is not None
    for step in range(3, 6):  # 2 s steps: 5 x 2 s passes the floor
        tr.feed(0, 0, (0, step), last + 2.0 * (step - 2))
    assert tr.limit()[0] == pytest.approx(10.0)
    assert [HangPolicy.parse(t, "30").describe() for t in ("auto:5", "auto", "off", "7")] == [
        "auto (floor 5 s), first step within 30 s",
        "auto, first step within 30 s",
        "off, first step within 30 s",
        "7 s, first step within 30 s",
    ]


def test_auto_limit_is_five_times_the_longest_interval_and_a_3x_slowdown_does_not_fire():
    tr = HangTracker(HangPolicy("auto"))
    tr.begin(0, [0, 1], 0.0)
    t = 0.0
    for step in range(10):  # 20 s steps: limit 100 s
        t += 20.0
        tr.feed(0, 0, (0, step), t)
        tr.feed(0, 1, (0, step), t + 0.5)
    limit, derived = tr.limit()
    assert limit == pytest.approx(100.0) and "5 x the longest step interval 20.0 s" in derived
    for step in range(10, 14):  # evaluation: steps 3x slower (60 s); never idle past the limit
        for probe in range(1, 60):
            assert tr.due(t + probe) is None
        t += 60.0
        tr.feed(0, 0, (0, step), t)
        tr.feed(0, 1, (0, step), t)
    assert tr.limit()[0] == pytest.approx(5 * 60.0)  # the limit grew with the slow steps
    assert tr.due(t + 5 * 60.0 - 1) is None and tr.due(t + 5 * 60.0 + 1) is not None


def test_a_job_without_steps_is_not_watched_by_auto_but_is_by_seconds():
    auto = HangTracker(HangPolicy("auto"))
    fixed = HangTracker(HangPolicy("fixed", 5.0))
    for tr in (auto, fixed):
        tr.begin(0, [0], 0.0)
        for t in range(0, 12, 2):  # a line every 2 s, no steps
            tr.feed(0, 0, None, float(t))
            assert tr.due(float(t) + 1.9) is None
    assert auto.due(1000.0) is None
    assert fixed.due(10.0 + 4.9) is None
    verdict = fixed.due(10.0 + 5.1)  # then quiet
    assert verdict is not None and verdict.derived == "--hang-timeout 5 s"


def test_a_rank_with_steps_progresses_only_by_new_steps():
    tr = HangTracker(HangPolicy("fixed", 5.0))
    tr.begin(0, [0], 0.0)
    tr.feed(0, 0, (0, 1), 1.0)
    for t in (2.0, 4.0, 6.0):
        tr.feed(0, 0, None, t)  # warnings while stuck
        tr.feed(0, 0, (0, 1), t)  # the same step again
    assert tr.due(6.5) is not None


def test_lines_of_an_older_attempt_are_ignored_and_begin_resets():
    tr = HangTracker(HangPolicy("fixed", 5.0))
    tr.begin(1, [0], 100.0)
    tr.feed(0, 0, (0, 9), 104.0)
    assert tr.due(1000.0) is None  # nothing printed in this attempt yet: importing, compiling
    tr.feed(1, 0, (0, 1), 105.0)
    assert tr.due(109.5) is None and tr.ranks()[0].last_step == (0, 1)
    assert tr.due(110.5) is not None


def test_first_step_timeout_in_any_mode():
    tr = HangTracker(HangPolicy("off", None, 30.0))
    tr.begin(0, [0, 1], 0.0)
    tr.feed(0, 0, None, 29.0)
    assert tr.due(29.5) is None
    verdict = tr.due(30.5)
    assert verdict is not None and "--first-step-timeout 30 s" in verdict.derived
    tr.begin(1, [0, 1], 100.0)
    tr.feed(1, 1, (0, 0), 110.0)
    assert tr.due(1000.0) is None  # a step came; off: nothing else is watched


DUMP_STUCK = """Process 7: python train.py
Python v3.11.7 (/usr/bin/python3.11)

Thread 7 (idle): "MainThread"
    clock_nanosleep (libc.so.6)
    time_sleep (libpython3.11.so.1.0)
    block_before_allreduce (train.py:21)
    train (train.py:40)
    <module> (train.py:60)
Thread 9 (idle): "Thread-1"
    wait (threading.py:327)
"""
DUMP_INSIDE = """Thread 8 (active): "MainThread"
    __call__ (mindspore/ops/primitive.py:412)
    construct (mindspore/nn/wrap/grad_reducer.py:440)
    train (train.py:41)
"""
DUMP_NATIVE = """Thread 8 (idle): "MainThread"
    syscall (libc.so.6)
    mindspore::device::cpu::ring_allreduce (libmindspore_backend.so)
    run_op (train.py:12)
"""


def test_parse_pyspy_main_thread_and_innermost_python_frame():
    threads = parse_pyspy(DUMP_STUCK)
    assert [t.name for t in threads] == ["MainThread", "Thread-1"]
    main = main_thread(threads)
    assert str(innermost_python(main)) == "block_before_allreduce (train.py:21)"
    assert not in_collective(main)
    assert in_collective(main_thread(parse_pyspy(DUMP_INSIDE)))
    assert in_collective(main_thread(parse_pyspy(DUMP_NATIVE)))  # a native MindSpore frame above the Python one
    proc_view = '# py-spy failed; the kernel\'s view from /proc\ntask 3 [S (sleeping)] "python"  wchan: futex_wait\n    kernel: [<0>] futex_wait\n'  # noqa: E501 - kept whole: a literal line as the program sees it
    assert main_thread(parse_pyspy(proc_view)) is None  # no Python frames: no frame is claimed


def test_culprit_outside_the_collective_wins_over_steps_and_silence():
    ranks = [
        RankEvidence(0, (0, 9), 30.0, "__call__ (mindspore/ops/primitive.py:412)", True),
        RankEvidence(1, (0, 9), 2.0, "block_before_allreduce (train.py:21)", False),
        RankEvidence(2, (0, 7), 40.0, "__call__ (mindspore/ops/primitive.py:412)", True),
    ]
    c = judge_culprit(ranks)
    assert c is not None and c.rank == 1 and "block_before_allreduce" in c.evidence


def test_culprit_by_step_behind_then_by_silence():
    assert (
        judge_culprit([RankEvidence(0, (1, 3), 5.0), RankEvidence(1, (1, 2), 1.0), RankEvidence(2, (1, 3), 9.0)]).rank
        == 1
    )
    c = judge_culprit([RankEvidence(0, (0, 4), 3.5), RankEvidence(1, (0, 4), 4.6)])
    assert c.rank == 1 and "silent first" in c.evidence
    assert judge_culprit([RankEvidence(0, (0, 4), 4.6), RankEvidence(1, (0, 4), 4.6)]) is None  # nothing stands out
    # Ranks that log no steps (steps printed on rank 0 only) are quiet by nature: silence is compared among the others.
    c = judge_culprit([RankEvidence(0, (0, 4), 30.0), RankEvidence(1, None, 90.0), RankEvidence(2, (0, 4), 10.0)])
    assert c.rank == 0 and "silent first" in c.evidence
    assert judge_culprit([RankEvidence(0, (0, 4), 30.0), RankEvidence(1, None, 90.0)]) is None
    assert (
        judge_culprit([RankEvidence(0, None, 30.0), RankEvidence(1, None, 9.0)]).rank == 0
    )  # no rank logs steps: as before


def test_a_stopped_rank_is_the_culprit_before_any_other_evidence():
    outside = RankEvidence(1, (0, 2), 40.0, "block_before_allreduce (train.py:21)", False)
    stopped = RankEvidence(2, (0, 9), 3.0, None, None, stopped_for=6.4)
    inside = RankEvidence(0, (0, 9), 30.0, "__call__ (mindspore/ops/primitive.py:412)", True)
    c = judge_culprit([inside, outside, stopped])
    assert c is not None and c.rank == 2 and "stopped (state T" in c.evidence and "6 s" in c.evidence
    # the longest stopped of two; one that is no longer alive is no evidence
    c = judge_culprit([RankEvidence(0, stopped_for=2.0), RankEvidence(1, stopped_for=9.0), inside])
    assert c.rank == 1
    c = judge_culprit([RankEvidence(0, (0, 9), 1.0), RankEvidence(1, (0, 8), 1.0, stopped_for=9.0, alive=False)])
    assert c.rank == 1 and "behind" in c.evidence  # judged by its step, not as stopped


def test_a_stopped_hang_reads_back_from_its_json_and_says_so():
    verdict = HangVerdict(2.0, "--stopped-timeout 2 s", 2.3, stopped_rank=1)
    assert verdict.to_json()["stopped_rank"] == 1 and "stopped_rank" not in HangVerdict(5.0, "x", 6.0).to_json()
    report = HangReport(
        kind=HangKind.STOPPED,
        limit_s=2.0,
        derived="--stopped-timeout 2 s",
        idle_s=2.3,
        stacks_dir="/j/stacks",
        culprit=judge_culprit([RankEvidence(0, (0, 4), 2.0), RankEvidence(1, (0, 4), 2.0, stopped_for=2.3)]),
        ranks=(HangRank(0, "a", "epoch 0 step 4"), HangRank(1, "b", "epoch 0 step 4", stopped_s=2.3)),
    )
    back = HangReport.from_json(report.to_json())
    assert back == report
    assert back.message().startswith("hung: a rank's process was stopped by a signal for 2.3 s (limit 2.0 s)")
    assert "likely culprit: rank 1: its process is stopped" in back.message()
    assert back.lines()[0].startswith("hung: a rank's process stopped for 2.3 s")
    assert "  rank 1: last epoch 0 step 4, main thread in a stopped process" in back.lines()


def test_a_rank_whose_collective_timed_out_is_never_the_culprit():
    ranks = [
        RankEvidence(0, (0, 4), 0.5, None, None, timed_out=True, alive=False),
        RankEvidence(1, (0, 4), 30.0, "stuck_reading_data (train.py:9)", False),
    ]
    c = judge_culprit(ranks)
    assert c.rank == 1 and "timed out" in c.evidence
    assert judge_culprit([RankEvidence(0, (0, 4), 0.5, timed_out=True, alive=False)]) is None


@pytest.mark.parametrize(
    "line",
    [
        "[ERROR] DEVICE(1,7f,python):2026-11-25-13:00:00.1 [mindspore/ccsrc/x.cc:88] Ring ReduceScatter wait receiving "
        "from rank 1 failed",
        "EI0002: The wait execution of the Notify register times out. HCCL_EXEC_TIMEOUT",
        "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE) ran for 600000 "
        "milliseconds",
    ],
)
def test_collective_timeout_lines(line):
    assert collective_timeout(["epoch: 0, step: 3, loss is 1.0", line]) == line.strip()


def test_ordinary_errors_are_not_collective_timeouts():
    assert (
        collective_timeout(
            ["Traceback (most recent call last):", "ValueError: bad shape", "epoch: 0, step: 1, loss is 2"]
        )
        is None
    )
    assert collective_timeout(["[WARNING] HCCL_EXEC_TIMEOUT is 1800 s; AllReduce timeout follows it"]) is None
