"""Secret variables in the plan (launcher.planning.job.secrets, build_plan): which names are
secret (named, the default patterns in any case, the user's patterns, none), and that every
shown form of the plan has ``<secret>`` where the ranks get the value."""

from __future__ import annotations

import json

import pytest

from launcher.planning.backends.mpirun import mpirun_plan_launch
from launcher.planning.build import build_plan
from launcher.planning.inventory.hostarg import parse_host_list
from launcher.planning.job.secrets import DEFAULT_PATTERNS, SHOWN, matches, redact_pairs, secret_names, split_pairs
from launcher.planning.job.spec import JobSpec

ENV = (("HF_TOKEN", "hf-1"), ("api_key", "k-2"), ("MY_PASSWORD_FILE", "/p"), ("PLAIN", "p"), ("KEYBOARD", "us"))


def spec(**kw):
    base = dict(
        inventory=parse_host_list("localhost:2"),
        program=("train.py",),
        python="/usr/bin/python3",
        cwd="/w",
        job_dir="/w/j",
        job_id="j",
        env=ENV,
    )
    base.update(kw)
    return JobSpec(**base)


@pytest.mark.parametrize(
    "name, secret",
    [
        ("HF_TOKEN", True),
        ("api_key", True),
        ("Db_Secret", True),
        ("PGPASSWORD", True),
        ("PLAIN", False),
        ("TOKE", False),
    ],
)
def test_default_patterns_match_in_any_case(name, secret):
    assert matches(name, DEFAULT_PATTERNS) is secret


def test_the_plans_secrets_are_the_named_and_the_users_names_matching_a_pattern():
    assert build_plan(spec()).secrets == {"HF_TOKEN", "api_key", "MY_PASSWORD_FILE", "KEYBOARD"}
    assert build_plan(spec(secret_patterns=())).secrets == frozenset()
    assert build_plan(spec(secret_patterns=("PL*",), secret_named=frozenset({"X"}))).secrets == {"PLAIN", "X"}
    # mslaunch's own variables are never secret by a pattern (MS_SCHED_PORT...): only the user's
    assert build_plan(spec(secret_patterns=("MS_*",))).secrets == frozenset()
    assert secret_names(["A"], ["B_KEY", "C"], DEFAULT_PATTERNS) == {"A", "B_KEY"}


def test_the_ranks_get_the_values_and_every_shown_form_has_secret():
    plan = build_plan(spec(launcher="mpirun", wrapper="/t/w.sh"))
    assert plan.ranks[0].env_dict()["HF_TOKEN"] == "hf-1"  # what the backends start the ranks with
    shown = json.dumps(plan.to_json())
    assert "hf-1" not in shown and "k-2" not in shown and '"HF_TOKEN": "<secret>"' in shown and '"PLAIN": "p"' in shown
    assert plan.to_json()["secrets"] == ["HF_TOKEN", "KEYBOARD", "MY_PASSWORD_FILE", "api_key"]
    assert dict(plan.shown_env(plan.ranks[1]))["api_key"] == SHOWN
    argv, env = mpirun_plan_launch(plan)
    assert not any("hf-1" in a for a in argv) and env["MSLAUNCH_V_HF_TOKEN"] == "hf-1"
    assert redact_pairs(ENV[:1], {"HF_TOKEN"}) == (("HF_TOKEN", SHOWN),)
    assert split_pairs(ENV[:4], {"HF_TOKEN"}) == (list(ENV[1:4]), [ENV[0]])
