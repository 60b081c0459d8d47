"""The suite's time budget (tests/harness/budget.py): what fails, on made-up times."""

import pytest

from tests.harness.budget import over_budget, over_declared, pace, too_slow

COSTS = {
    "tests/a.py::test_job": ("tests/a.py::test_job", 30.0),
    "tests/b.py::test_one": ("tests/b.py::[runs]", 20.0),
    "tests/b.py::test_two": ("tests/b.py::[runs]", 20.0),
}


def test_a_declaration_over_a_minute_is_refused_and_a_group_counts_as_one():
    assert over_declared(COSTS) == []
    costs = dict(COSTS, **{"tests/b.py::test_three": ("tests/b.py::[runs]", 25.0)})
    (line,) = over_declared(costs)
    assert line.startswith("tests/b.py::[runs] declares 65 s: more than 60 s for one test")


@pytest.mark.parametrize(
    "durations, bad",
    [
        ({"tests/a.py::test_job": 99.0, "tests/c.py::test_unit": 29.0}, []),  # within 3 x 30 + 10, under 30
        ({"tests/a.py::test_job": 101.0}, ["tests/a.py::test_job took 101 s, over 100 s"]),
        ({"tests/c.py::test_unit": 31.0}, ["tests/c.py::test_unit took 31 s with no cost marker"]),
        # a group: its members' times add up against its summed markers (3 x 40 + 10)
        ({"tests/b.py::test_one": 100.0, "tests/b.py::test_two": 29.0}, []),
        ({"tests/b.py::test_one": 100.0, "tests/b.py::test_two": 31.0}, ["tests/b.py::[runs] took 131 s, over 130 s"]),
    ],
)
def test_a_test_slower_than_it_says_is_named(durations, bad):
    lines = too_slow(durations, COSTS)
    assert [line[: len(b)] for line, b in zip(lines, bad)] == bad and len(lines) == len(bad)


def test_the_limits_stretch_with_the_runs_pace_and_only_with_it():
    """Every end-to-end test 1.5 x its marker: the run's pace is 1.5 and none is named; one test
    6 x its marker among them is still named; the pace is never under 1 nor over 2."""
    costs = {f"tests/e.py::test_{i}": (f"tests/e.py::test_{i}", 20.0) for i in range(5)}
    costs.update(COSTS)
    slow = {nodeid: 1.5 * seconds for nodeid, (_key, seconds) in costs.items() if nodeid != "tests/b.py::test_two"}
    slow["tests/b.py::test_two"] = 30.0
    assert pace(slow, costs) == 1.5
    slow["tests/c.py::test_unit"] = 40.0  # unmarked: 30 x 1.5 = 45 s allowed
    assert too_slow(slow, costs) == []
    slow["tests/e.py::test_0"] = 6 * 20.0  # over 3 x 20 x 1.5 + 10 = 100
    (line,) = too_slow(slow, costs)
    assert line.startswith("tests/e.py::test_0 took 120 s, over 100 s (3 x its cost marker of 20 s at this run's pace")
    fast = {nodeid: 0.5 * seconds for nodeid, (_key, seconds) in costs.items()}
    assert pace(fast, costs) == 1.0 and pace({k: 10 * v for k, v in slow.items()}, costs) == 2.0
    assert pace({"tests/c.py::test_unit": 5.0}, COSTS) == 1.0  # no marked test ran
    assert pace({"tests/a.py::test_job": 70.0}, COSTS) == 1.0  # one is too few to tell the pace


def test_the_total_is_held_to_the_budget_when_one_is_set():
    assert over_budget(419.0, 420.0) == [] and over_budget(1000.0, None) == []
    (line,) = over_budget(421.0, 420.0)
    assert line.startswith("the suite took 421 s, over its budget of 420 s")


class _Report:
    def __init__(self, nodeid, duration, cost=None):
        self.nodeid, self.duration = nodeid, duration
        self.user_properties = [("cost", cost)] if cost else []


class _Session:
    exitstatus = 0


def test_the_plugin_reads_costs_from_the_reports_and_fails_a_passing_run(monkeypatch):
    """As under pytest-xdist's controller: the costs come with the workers' reports."""
    from tests.harness.budget import BudgetPlugin

    monkeypatch.setenv("MSLAUNCH_TEST_LIMITS", "1")
    monkeypatch.delenv("MSLAUNCH_TEST_BUDGET", raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    plugin = BudgetPlugin()
    for phase in (1.0, 100.0, 1.0):  # setup, call, teardown
        plugin.pytest_runtest_logreport(_Report("tests/a.py::test_job", phase, ("tests/a.py::test_job", 30.0)))
    plugin.pytest_runtest_logreport(_Report("tests/c.py::test_unit", 0.5))
    session = _Session()
    plugin.pytest_sessionfinish(session, 0)
    assert session.exitstatus == 1
    assert [p.split(",")[0] for p in plugin.problems] == ["tests/a.py::test_job took 102 s"]


def test_a_test_of_the_fast_loop_over_a_cpu_second_is_named():
    from tests.harness.budget import too_heavy

    assert too_heavy({"tests/a.py::test_unit": 0.4, "tests/a.py::test_edge": 1.0}) == []
    (line,) = too_heavy({"tests/a.py::test_unit": 0.4, "tests/a.py::test_spawns": 1.7})
    assert line.startswith("tests/a.py::test_spawns used 1.7 s of CPU, over 1 s for a test of make test-fast")
    assert "pytest.mark.e2e" in line and "pytest.mark.heavy" in line


def test_the_cpu_of_a_fast_test_reaches_the_controller_and_fails_the_run(monkeypatch):
    from tests.harness.budget import BudgetPlugin

    monkeypatch.delenv("MSLAUNCH_TEST_LIMITS", raising=False)
    monkeypatch.delenv("MSLAUNCH_TEST_BUDGET", raising=False)
    monkeypatch.setenv("MSLAUNCH_FAST_TESTS", "1")
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    plugin = BudgetPlugin()
    report = _Report("tests/c.py::test_spawns", 0.1)
    report.user_properties.append(("cpu", 2.5))
    plugin.pytest_runtest_logreport(report)
    session = _Session()
    plugin.pytest_sessionfinish(session, 0)
    assert session.exitstatus == 1 and plugin.problems[0].startswith("tests/c.py::test_spawns used 2.5 s of CPU")


def test_make_test_fast_leaves_out_the_markers_the_budget_knows():
    import re

    from tests.harness.budget import NOT_FAST
    from tests.harness.paths import REPO

    with open(f"{REPO}/Makefile") as fh:
        (expr,) = re.findall(r'MSLAUNCH_FAST_TESTS=1 .* -m "not \(([^)]*)\)"', fh.read())
    assert tuple(expr.split(" or ")) == NOT_FAST
