"""``--ckpt-every N | auto[:N]`` of the reference trainer (no MindSpore)."""

from __future__ import annotations

import pytest

from launcher.workloads.ckpt_every import (
    OFFER_STEPS_VAR,
    Schedule,
    ckpt_every_steps,
    daly_steps,
    parse_ckpt_every,
    schedule_for,
)


@pytest.mark.parametrize(
    "spec, env, want",
    [
        ("0", {}, 0),
        ("25", {OFFER_STEPS_VAR: "7"}, 25),  # a number is the user's: mslaunch's offer does not change it
        ("auto", {}, 0),  # nothing offered yet (no fault): epoch ends only
        ("auto:50", {}, 50),  # ... or the fallback
        ("auto", {OFFER_STEPS_VAR: "7"}, 7),
        ("auto:50", {OFFER_STEPS_VAR: " 12 "}, 12),
        ("auto:50", {OFFER_STEPS_VAR: "0"}, 50),  # not a usable offer
        ("auto:50", {OFFER_STEPS_VAR: "x"}, 50),
    ],
)
def test_steps_between_checkpoints(spec, env, want):
    assert ckpt_every_steps(parse_ckpt_every(spec), env) == want


@pytest.mark.parametrize("bad", ["-1", "auto:", "auto:-3", "every", "1.5", "", "auto:x", "\u00b2"])
def test_other_values_are_refused_naming_the_forms(bad):
    with pytest.raises(ValueError, match=r"--ckpt-every takes N \(steps, >= 0\), auto or auto:N"):
        parse_ckpt_every(bad)


@pytest.mark.parametrize(
    "spec, env, every, measured",
    [
        ("auto", {}, 0, True),  # nothing offered: the job's own figures
        ("auto", {OFFER_STEPS_VAR: "3"}, 3, False),  # mslaunch's offer, the same on every rank
        ("auto:5", {}, 5, False),  # the user's N until an offer
        ("7", {OFFER_STEPS_VAR: "3"}, 7, False),
        ("0", {}, 0, False),
    ],
)
def test_which_schedule_a_spec_gets(spec, env, every, measured):
    s = schedule_for(parse_ckpt_every(spec), env)
    assert (s.every, s.measured) == (every, measured)


def test_a_fixed_schedule_saves_on_multiples_and_ignores_figures():
    s = Schedule(4)
    s.agree([(0.1, 1.0)], 3)
    assert [g for g in range(1, 13) if s.due(g)] == [4, 8, 12]
    assert not any(Schedule(0).due(g) for g in range(1, 20))


def test_daly_steps_on_the_time_trained_so_far():
    # C = 0.2 s, steps of 6 s: after 20 steps (M = 120 s) sqrt(2 * 0.2 * 120) - 0.2 = 6.73 s: 1 step;
    # after 200 steps (M = 1200 s) 21.7 s: 3 steps; the interval grows as the root of the time.
    assert daly_steps(0.2, 6.0, 20) == 1
    assert daly_steps(0.2, 6.0, 200) == 3
    assert daly_steps(0.2, 6.0, 2000) == 11
    # A write that costs half the time so far or more: Daly's M, the steps done so far.
    assert daly_steps(5.0, 1.0, 8) == 8
    assert daly_steps(0.0, 1.0, 50) == 1  # free writes: every step
    assert daly_steps(0.2, 6.0, 0) == 1


def test_measured_saves_every_step_until_every_rank_has_figures_then_follows_daly():
    s = Schedule(0, measured=True)
    assert s.due(1) and s.mine() == (-1.0, -1.0)
    s.save_took(0.3)
    s.agree([s.mine(), (0.25, 2.0)], 1)  # this rank has timed no step yet (the first one compiled)
    assert s.next_step == 2 and s.due(2)
    for t in (2.0, 2.2, 1.8, 2.0, 9.0, 2.1):  # medians of the last 5: one slow step does not count
        s.step_took(t)
    s.save_took(0.5)
    s.save_took(0.4)
    assert s.mine() == (0.4, 2.1)
    # The slowest rank's figures: write 0.6 s, step 3.0 s; after 100 steps M = 300 s:
    # sqrt(2 * 0.6 * 300) - 0.6 = 18.4 s = 6 steps of 3 s.
    s.agree([s.mine(), (0.6, 2.0), (0.3, 3.0)], 100)
    assert s.next_step == 106
    assert [g for g in range(101, 112) if s.due(g)] == list(range(106, 112))


def test_ranks_with_other_figures_agree_on_the_same_table():
    """Every rank gets the same gathered table, so every rank picks the same next step, whatever
    its own figures (a save is collective: a rank that saved alone would wait for the others)."""
    ranks = [Schedule(0, measured=True) for _ in range(3)]
    for k, s in enumerate(ranks):
        s.step_took(1.0 + k)
        s.save_took(0.1 * (k + 1))
    table = [s.mine() for s in ranks]
    for s in ranks:
        s.agree(table, 500)
    assert len({s.next_step for s in ranks}) == 1 and ranks[0].next_step == 500 + daly_steps(0.3, 3.0, 500)
