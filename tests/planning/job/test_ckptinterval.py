"""Young's and Daly's checkpoint interval from the job's own figures (pure)."""

from __future__ import annotations

import math

import pytest

from launcher.planning.job.ckptinterval import ENV_VAR, STEPS_VAR, Advice, advise, daly_interval
from launcher.workloads.ckpt_every import OFFER_STEPS_VAR


@pytest.mark.parametrize(
    "cost, mtbf, want",
    [
        (1.0, 800.0, math.sqrt(1600.0) - 1.0),  # 39 s: sqrt(2 C M) - C
        (2.0, 3600.0, math.sqrt(14400.0) - 2.0),  # 118 s
        (0.0, 600.0, 0.0),  # a free checkpoint: as often as you like
        (50.0, 100.0, 100.0),  # a write of half the time between faults or more: once per fault
        (80.0, 100.0, 100.0),
    ],
)
def test_daly_first_order(cost, mtbf, want):
    assert daly_interval(cost, mtbf) == pytest.approx(want)


def test_the_interval_grows_with_the_cost_and_the_time_between_faults():
    grid = [daly_interval(c, m) for c in (0.5, 1, 2, 4) for m in (600, 1200)]
    assert grid[0] < grid[2] < grid[4] < grid[6] and all(grid[i] < grid[i + 1] for i in (0, 2, 4, 6))


@pytest.mark.parametrize("cost, mtbf", [(-1.0, 10.0), (1.0, 0.0), (1.0, -5.0), (float("nan"), 10.0)])
def test_impossible_figures_are_refused(cost, mtbf):
    with pytest.raises(ValueError):
        daly_interval(cost, mtbf)


def test_advice_needs_a_checkpoint_cost_and_a_fault():
    assert advise(None, 2, 600.0) is None  # the ranks never reported a checkpoint
    assert advise(1.0, 0, 600.0) is None  # no fault yet: no time between faults
    assert advise(float("inf"), 1, 600.0) is None and advise(1.0, 1, 0.0) is None
    a = advise(1.0, 2, 1600.0)  # faults 800 s apart
    assert a is not None and (a.mtbf_seconds, a.faults, a.ckpt_seconds) == (800.0, 2, 1.0)
    assert a.seconds == pytest.approx(39.0) and a.steps is None
    assert a.env() == {ENV_VAR: "39"}


def test_the_interval_in_steps_is_the_same_number_for_every_rank_and_at_least_one():
    a = advise(1.0, 2, 1600.0, step_seconds=0.5)
    assert a is not None and a.steps == 78 and a.env() == {ENV_VAR: "39", STEPS_VAR: "78"}
    assert Advice(1.0, 0.0, 10.0, 1, step_seconds=30.0).steps == 1  # steps longer than the interval
    assert advise(0.0, 1, 5.0).seconds == 1.0  # never under a second
    assert advise(1.0, 1, 800.0, step_seconds=0.0).steps is None


def test_the_trainer_reads_the_variable_mslaunch_sets():
    assert OFFER_STEPS_VAR == STEPS_VAR
