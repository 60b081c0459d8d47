"""The reference trainer's use of the compile-cache folder mslaunch offers (no MindSpore needed)."""

from __future__ import annotations

from launcher.planning.job.envs import COMPILE_CACHE_OFFER, COMPILE_CACHE_VARS
from launcher.workloads.compile_cache import ENABLE_VAR, OFFER_VAR, PATH_VAR, stop_caching, use_offered_cache


def test_the_names_are_the_launchers():
    assert OFFER_VAR == COMPILE_CACHE_OFFER and (ENABLE_VAR, PATH_VAR) == COMPILE_CACHE_VARS


def test_an_offered_folder_turns_the_cache_on_there():
    env = {OFFER_VAR: "/jobs/j1/compile_cache", "OTHER": "x"}
    assert use_offered_cache(env) == "/jobs/j1/compile_cache"
    assert env == {
        OFFER_VAR: "/jobs/j1/compile_cache",
        "OTHER": "x",
        ENABLE_VAR: "1",
        PATH_VAR: "/jobs/j1/compile_cache",
    }
    stop_caching(env)
    assert env[ENABLE_VAR] == "0" and env[PATH_VAR] == "/jobs/j1/compile_cache"


def test_nothing_offered_or_the_users_own_settings_leave_the_env_alone():
    for env in (
        {},
        {OFFER_VAR: "  "},
        {OFFER_VAR: "/c", ENABLE_VAR: "0"},
        {OFFER_VAR: "/c", PATH_VAR: "/mine"},
        {OFFER_VAR: "/c", ENABLE_VAR: "1", PATH_VAR: "/mine"},
    ):
        before = dict(env)
        assert use_offered_cache(env) is None and env == before, before


def test_a_run_smaller_than_planned_caches_in_a_folder_of_its_size():
    """Fewer ranks than planned (--min-hosts): other graphs (another K and micro-batch), the same in
    every attempt of that size: each size has its own folder; the planned size keeps the offered one."""
    sized = {"MSLAUNCH_WORLD_SIZE": "2", "MSLAUNCH_PLANNED_WORLD_SIZE": "3"}
    env = {OFFER_VAR: "/jobs/j1/compile_cache", **sized}
    assert use_offered_cache(env) == "/jobs/j1/compile_cache/world-2-of-3" == env[PATH_VAR]
    assert env[ENABLE_VAR] == "1"
    one = {OFFER_VAR: "/jobs/j1/compile_cache", "MSLAUNCH_WORLD_SIZE": "1", "MSLAUNCH_PLANNED_WORLD_SIZE": "3"}
    assert use_offered_cache(one) == "/jobs/j1/compile_cache/world-1-of-3"
    full = {OFFER_VAR: "/jobs/j1/compile_cache", "MSLAUNCH_WORLD_SIZE": "3", "MSLAUNCH_PLANNED_WORLD_SIZE": "3"}
    assert use_offered_cache(full) == "/jobs/j1/compile_cache"
    mine = {OFFER_VAR: "/c", PATH_VAR: "/mine", **sized}  # the user's own settings still win
    assert use_offered_cache(mine) is None and mine[PATH_VAR] == "/mine"
