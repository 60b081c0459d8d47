"""``--ckpt-every N | auto[:N]`` of the reference trainer (no MindSpore)."""

from __future__ import annotations

import pytest

from launcher.workloads.ckpt_every import OFFER_STEPS_VAR, ckpt_every_steps, parse_ckpt_every


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
