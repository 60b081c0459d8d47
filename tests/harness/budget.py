"""The suite's time budget, kept by the suite itself (registered in ``tests/conftest.py``).

``make test`` must stay within its budget on a fresh clone (docs/development.md): so every test
pays for its own time.  A test that takes long says so with ``pytest.mark.cost(SECONDS)``
(:mod:`tests.harness.order` also uses it to start the long tests first), and the run checks:

* at collection (``make test``: :data:`ENFORCE_VAR` set): no test (or group of tests sharing a
  fixture) declares more than :data:`MAX_TEST_SECONDS`: a longer one must be split, shared or
  made cheaper;
* at the end, from the time each test took (setup, call and teardown; a group's summed):
  a test without a marker over :data:`UNMARKED_SECONDS`, or a marked one over
  :data:`SLACK` times its marker plus :data:`GRACE_SECONDS`, is named with its time, and the run
  fails (``make test`` only: :data:`ENFORCE_VAR` set), so a new slow test cannot slip in
  unannounced; both limits stretch with the run's own pace (:func:`pace`: how much slower than
  their markers the run's end-to-end tests went, as a whole, up to :data:`MAX_PACE`), so a slower
  CPU or a busy machine does not fail a test that is as slow as the others;
* with ``MSLAUNCH_TEST_BUDGET=SECONDS`` (``make test`` sets it to pytest's share of the budget),
  the run fails when pytest's own wall time passes it;
* the tests of ``make test-fast`` (none of the markers of :data:`NOT_FAST`) stay cheap: a test
  there that used more than :data:`FAST_CPU_SECONDS` of CPU (its own and its child processes',
  from ``getrusage``: CPU time, not wall time, so a busy machine does not make it fail) is named,
  and ``make test-fast`` fails: one that starts a program as a process is ``e2e``, one that works
  at scale in-process is ``heavy``.  (Only there: ``make test`` runs the property tests with all
  their examples, ten times those of ``make test-fast``.)

Times on this machine are noisy (other work shares its two cores), so the limits are loose:
they catch a test that is several times slower than it says, not a slow minute.  A subset of the
suite (``-k``, ``-m``, a file) is not held to the total.
"""

from __future__ import annotations

import os
import resource
import time
from typing import Any, Dict, List, Mapping, Optional, Tuple

import pytest

#: The most a test (or a group sharing a module fixture) may declare with ``pytest.mark.cost``.
MAX_TEST_SECONDS = 60.0
#: A test without a cost marker may take this long.
UNMARKED_SECONDS = 30.0
#: A marked test may take ``SLACK`` times its marker plus :data:`GRACE_SECONDS`.
SLACK = 3.0
GRACE_SECONDS = 10.0
#: The limits above stretch with the run's pace (:func:`pace`), up to this factor ...
MAX_PACE = 2.0
#: ... judged from the tests that declare at least this many seconds (the end-to-end jobs).
PACE_MIN_COST = 10.0
#: With fewer such tests in the run than this, the pace is 1: too few to say how fast the run went.
PACE_MIN_TESTS = 5
#: Set (to anything) to fail the run on the per-test limits; ``make test`` sets it.
ENFORCE_VAR = "MSLAUNCH_TEST_LIMITS"
#: pytest's wall-time budget of the whole suite, in seconds (unset: not checked).
BUDGET_VAR = "MSLAUNCH_TEST_BUDGET"
#: Set by ``make test-fast`` (also read by tests/harness/hypo.py).
FAST_VAR = "MSLAUNCH_FAST_TESTS"
#: The markers ``make test-fast`` leaves out (its ``-m`` expression; tests/harness/test_budget.py
#: holds the Makefile to it).
NOT_FAST = ("mindspore", "netns", "mpi", "slurm", "e2e", "heavy")
#: The most CPU seconds (its own process's and its children's) a test of ``make test-fast`` may use;
#: those left there use at most about 0.5 s.
FAST_CPU_SECONDS = 1.0


def declared(costs: Mapping[str, Tuple[str, float]]) -> Dict[str, float]:
    """Group key -> declared seconds, from ``nodeid -> (group key, seconds)``."""
    out: Dict[str, float] = {}
    for key, seconds in costs.values():
        out[key] = out.get(key, 0.0) + seconds
    return out


def over_declared(costs: Mapping[str, Tuple[str, float]], limit: float = MAX_TEST_SECONDS) -> List[str]:
    """One line per group that declares more than ``limit`` seconds."""
    return [
        f"{key} declares {seconds:.0f} s: more than {limit:.0f} s for one test;"
        " split it, share its job or make it cheaper"
        for key, seconds in sorted(declared(costs).items())
        if seconds > limit
    ]


def pace(durations: Mapping[str, float], costs: Mapping[str, Tuple[str, float]], most: float = MAX_PACE) -> float:
    """How much slower than their markers this run's marked tests went, as a whole: the median of
    taken / declared over the groups that declare at least :data:`PACE_MIN_COST` seconds (1 with
    fewer than :data:`PACE_MIN_TESTS` of them), at least 1 and at most ``most``.  The markers were
    measured on one machine; a slower CPU or a busier one makes every end-to-end test slower alike,
    and the run is its own anchor: a test is judged against the others of the same run, not
    against a time measured elsewhere."""
    taken = _taken(durations, costs)
    allowed = declared(costs)
    ratios = sorted(taken[k] / allowed[k] for k in taken if allowed.get(k, 0.0) >= PACE_MIN_COST)
    if len(ratios) < PACE_MIN_TESTS:
        return 1.0
    mid = len(ratios) // 2
    median = ratios[mid] if len(ratios) % 2 else (ratios[mid - 1] + ratios[mid]) / 2
    return min(max(median, 1.0), most)


def _taken(durations: Mapping[str, float], costs: Mapping[str, Tuple[str, float]]) -> Dict[str, float]:
    taken: Dict[str, float] = {}
    for nodeid, seconds in durations.items():
        key = costs[nodeid][0] if nodeid in costs else nodeid
        taken[key] = taken.get(key, 0.0) + seconds
    return taken


def too_slow(
    durations: Mapping[str, float],
    costs: Mapping[str, Tuple[str, float]],
    unmarked: float = UNMARKED_SECONDS,
    slack: float = SLACK,
    grace: float = GRACE_SECONDS,
) -> List[str]:
    """One line per test (or group) slower than it may be: unmarked over ``unmarked`` seconds,
    marked over ``slack`` x its marker + ``grace``; both limits times the run's :func:`pace`."""
    taken = _taken(durations, costs)
    allowed = declared(costs)
    run_pace = pace(durations, costs)
    at = f" at this run's pace of {run_pace:.2f}" if run_pace > 1.0 else ""
    out = []
    for key, seconds in sorted(taken.items(), key=lambda kv: -kv[1]):
        if key in allowed:
            limit = slack * allowed[key] * run_pace + grace
            if seconds > limit:
                out.append(
                    f"{key} took {seconds:.0f} s, over {limit:.0f} s ({slack:g} x its cost marker of"
                    f" {allowed[key]:.0f} s{at} + {grace:.0f} s): make it cheaper or declare what it costs"
                )
        elif seconds > unmarked * run_pace:
            out.append(
                f"{key} took {seconds:.0f} s with no cost marker (limit {unmarked * run_pace:.0f} s{at}):"
                " make it cheaper or mark it pytest.mark.cost(SECONDS)"
            )
    return out


def too_heavy(cpu: Mapping[str, float], limit: float = FAST_CPU_SECONDS) -> List[str]:
    """One line per test of ``make test-fast`` that used more than ``limit`` CPU seconds."""
    return [
        f"{nodeid} used {seconds:.1f} s of CPU, over {limit:g} s for a test of make test-fast:"
        " mark it pytest.mark.e2e if it starts a program as a process, pytest.mark.heavy if it works"
        " at scale, or make it cheaper"
        for nodeid, seconds in sorted(cpu.items(), key=lambda kv: -kv[1])
        if seconds > limit
    ]


def cpu_seconds() -> float:
    """CPU seconds of this process and of the children it waited for, so far."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def over_budget(wall: float, budget: Optional[float]) -> List[str]:
    """One line when pytest's wall time passed ``budget`` seconds."""
    if budget is None or wall <= budget:
        return []
    return [f"the suite took {wall:.0f} s, over its budget of {budget:.0f} s (docs/development.md): make tests cheaper"]


class BudgetPlugin:
    """Records each test's time and checks the limits above (a pytest plugin object).

    Under pytest-xdist the workers collect and run the tests and the controller sees their
    reports: each test's cost marker travels with its reports (``user_properties``)."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.costs: Dict[str, Tuple[str, float]] = {}
        self.durations: Dict[str, float] = {}
        self.cpu: Dict[str, float] = {}  # make test-fast's tests: CPU seconds each
        self.problems: List[str] = []
        self._cpu_at_setup = 0.0

    def pytest_collection_modifyitems(self, config: Any, items: List[Any]) -> None:
        from tests.harness.order import cost_of

        costs = {}
        for it in items:
            if it.get_closest_marker("cost") is not None:
                costs[it.nodeid] = cost_of(it)
                it.user_properties.append(("cost", costs[it.nodeid]))
        problems = over_declared(costs) if os.environ.get(ENFORCE_VAR) else []
        if problems:
            raise pytest.UsageError("\n".join(problems))

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: Any) -> None:
        self._cpu_at_setup = cpu_seconds()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: Any, call: Any) -> Any:
        """On a test of ``make test-fast``'s teardown report: the CPU seconds of its three phases
        (measured where it ran: the pytest-xdist worker)."""
        outcome = yield
        if call.when == "teardown" and not any(item.get_closest_marker(m) for m in NOT_FAST):
            outcome.get_result().user_properties.append(("cpu", cpu_seconds() - self._cpu_at_setup))

    def pytest_runtest_logreport(self, report: Any) -> None:
        self.durations[report.nodeid] = self.durations.get(report.nodeid, 0.0) + float(report.duration)
        for name, value in getattr(report, "user_properties", ()):
            if name == "cost":
                key, seconds = value
                self.costs[report.nodeid] = (str(key), float(seconds))
            elif name == "cpu":
                self.cpu[report.nodeid] = float(value)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: Any, exitstatus: int) -> None:
        if os.environ.get("PYTEST_XDIST_WORKER"):
            return  # the controller sees every report and judges
        if os.environ.get(ENFORCE_VAR):
            self.problems += too_slow(self.durations, self.costs)
        if os.environ.get(FAST_VAR, "") not in ("", "0"):
            self.problems += too_heavy(self.cpu)
        budget = os.environ.get(BUDGET_VAR)
        if budget and whole_suite(session.config):
            self.problems += over_budget(time.monotonic() - self.start, float(budget))
        if self.problems and session.exitstatus == 0:
            session.exitstatus = 1

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.problems:
            terminalreporter.section("the suite's time budget (tests/harness/budget.py)", sep="=", red=True)
            for line in self.problems:
                terminalreporter.write_line(line)


def whole_suite(config: Any) -> bool:
    """The run is the whole suite: its paths are the configured testpaths and nothing deselects."""
    opts = config.option
    return (
        config.args_source == pytest.Config.ArgsSource.TESTPATHS
        and not getattr(opts, "keyword", "")
        and not getattr(opts, "markexpr", "")
    )
