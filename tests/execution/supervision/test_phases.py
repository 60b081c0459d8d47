"""The attempt's phases: the table of allowed moves, and a refused move."""

from __future__ import annotations

import pytest

from launcher.execution.supervision.phases import TRANSITIONS, AttemptPhase, IllegalTransition, check_transition
from launcher.execution.supervision.state import AttemptState

P = AttemptPhase

ALLOWED = {
    (P.STARTING, P.RUNNING),
    (P.STARTING, P.TEARING_DOWN),
    (P.RUNNING, P.FINISHING),
    (P.RUNNING, P.HUNG),
    (P.RUNNING, P.TEARING_DOWN),
    (P.FINISHING, P.TEARING_DOWN),
    (P.HUNG, P.TEARING_DOWN),
    (P.TEARING_DOWN, P.DONE),
}


def test_the_table_names_every_phase_and_only_the_allowed_moves():
    assert set(TRANSITIONS) == set(AttemptPhase)
    assert {(a, b) for a, nexts in TRANSITIONS.items() for b in nexts} == ALLOWED
    assert TRANSITIONS[P.DONE] == frozenset()


@pytest.mark.parametrize("current,target", sorted(ALLOWED, key=lambda m: (m[0].value, m[1].value)))
def test_every_allowed_move_is_taken(current, target):
    assert check_transition(current, target) is target


@pytest.mark.parametrize(
    "current,target", [(a, b) for a in AttemptPhase for b in AttemptPhase if (a, b) not in ALLOWED]
)
def test_every_other_move_is_refused(current, target):
    with pytest.raises(IllegalTransition) as info:
        check_transition(current, target)
    assert (info.value.current, info.value.target) == (current, target)


def test_the_attempt_state_moves_only_along_the_table():
    state = AttemptState()
    assert state.phase is P.STARTING
    state.transition(P.RUNNING)
    with pytest.raises(IllegalTransition, match="attempt phase running cannot move to done"):
        state.transition(P.DONE)
    assert state.phase is P.RUNNING  # a refused move changes nothing
    state.transition(P.TEARING_DOWN)
    state.transition(P.DONE)
    assert state.phases == [P.STARTING, P.RUNNING, P.TEARING_DOWN, P.DONE]
