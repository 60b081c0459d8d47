"""The straggler judge: the rule, its evidence, recovery, and that a common load names nobody."""

from __future__ import annotations

from typing import Dict, List, Tuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from launcher.errors import PlanError
from launcher.planning.health.stragglers import Sample, StragglerJudge, StragglerPolicy, Update
from tests.harness.hypo import examples

POLICY = StragglerPolicy(window=30.0)
HOSTS = {0: "10.0.0.2", 1: "10.0.0.2", 2: "10.0.0.3", 3: "10.0.0.3"}


class Ranks:
    """Cumulative figures of ranks fed to a judge every ``every`` seconds: each rank's CPU and
    delay seconds per second of the next step are given."""

    def __init__(self, judge: StragglerJudge, n: int = 4) -> None:
        self.judge = judge
        self.t = 0.0
        self.figs: Dict[int, Tuple[float, float]] = {r: (0.0, 0.0) for r in range(n)}

    def step(self, rates: Dict[int, Tuple[float, float]]) -> Update:
        dt = self.judge.policy.every
        self.t += dt
        for r, (cpu, delay) in rates.items():
            c, d = self.figs[r]
            self.figs[r] = (c + cpu * dt, d + delay * dt)
        return self.judge.feed({r: Sample(self.t, c, d) for r, (c, d) in self.figs.items()}, HOSTS, self.t)


def healthy(n: int = 4, cpu: float = 0.3, delay: float = 0.08) -> Dict[int, Tuple[float, float]]:
    return {r: (cpu, delay) for r in range(n)}


def test_a_starved_rank_is_named_once_with_evidence_then_cleared_when_it_recovers() -> None:
    ranks = Ranks(StragglerJudge(POLICY))
    named: List[Update] = []
    for _ in range(10):
        assert ranks.step(healthy()) == Update()
    slow = {**healthy(), 2: (0.1, 0.9)}  # a 10 % CPU quota: runnable all the time
    for _ in range(12):
        named.append(ranks.step(slow))
    verdicts = [v for u in named for v in u.named]
    assert [v.rank for v in verdicts] == [2]
    assert verdicts[0].evidence.startswith("rank 2 on 10.0.0.3 waited for CPU ")
    assert "% of its runnable time over the last 30 s (the other ranks 21 %)" in verdicts[0].evidence
    assert ranks.judge.named[2].share > 0.8
    cleared = [v for _ in range(20) for v in ranks.step(healthy()).cleared]
    assert [v.rank for v in cleared] == [2]
    assert ranks.judge.named == {}


def test_naming_waits_for_the_confirmations() -> None:
    policy = StragglerPolicy(window=12.0, confirm=3)
    ranks = Ranks(StragglerJudge(policy))
    for _ in range(6):
        ranks.step(healthy())
    slow = {**healthy(), 1: (0.05, 0.95)}
    steps = 0
    while not ranks.step(slow).named:
        steps += 1
        assert steps < 20
    # the window must hold mostly starved time, then three judgements in a row
    assert steps >= policy.confirm - 1


@pytest.mark.parametrize(
    "rates",
    [
        {0: (0.02, 0.98), 1: (0.02, 0.98)},  # one rank alone has nobody to compare with
        {0: (0.01, 0.05), 1: (0.3, 0.02), 2: (0.3, 0.02)},  # runnable too little of the window
        {0: (0.3, 0.25), 1: (0.3, 0.02), 2: (0.3, 0.02)},  # waits, but under half its runnable time
        {0: (0.12, 0.88), 1: (0.14, 0.86), 2: (0.13, 0.87)},  # a heavy load on every rank
    ],
)
def test_no_straggler(rates: Dict[int, Tuple[float, float]]) -> None:
    if len(rates) == 2:
        rates = {0: rates[0]}
    judge = StragglerJudge(POLICY)
    ranks = Ranks(judge, len(rates))
    for _ in range(20):
        assert ranks.step(rates) == Update()


def test_under_a_heavy_common_load_a_starved_rank_still_stands_out() -> None:
    """At load 9 on 2 cores healthy ranks measured 0.84-0.88; a rank held to 3 % of a CPU waits 0.97."""
    rates = {0: (0.13, 0.87), 1: (0.12, 0.88), 2: (0.03, 0.97)}
    ranks = Ranks(StragglerJudge(POLICY), 3)
    assert any(v.rank == 2 for _ in range(12) for v in ranks.step(rates).named)


def test_a_new_process_starts_its_figures_afresh() -> None:
    judge = StragglerJudge(StragglerPolicy(window=6.0, confirm=1))
    judge.feed({0: Sample(0, 50, 50), 1: Sample(0, 1, 0)}, HOSTS, 0)
    update = judge.feed({0: Sample(5, 0.1, 0.0), 1: Sample(5, 2, 0)}, HOSTS, 5)  # rank 0 restarted
    assert update == Update() and 0 not in judge.last_shares


@settings(max_examples=examples(80), deadline=None)
@given(
    n=st.integers(2, 8),
    common=st.lists(st.floats(0.0, 0.95), min_size=25, max_size=25),
    jitter=st.lists(st.lists(st.floats(-0.04, 0.04), min_size=8, max_size=8), min_size=25, max_size=25),
    cpu=st.floats(0.05, 1.0),
)
def test_a_common_load_with_noise_names_nobody(
    n: int, common: List[float], jitter: List[List[float]], cpu: float
) -> None:
    """Every rank under the same (changing) load, each with its own noise: nobody is named."""
    ranks = Ranks(StragglerJudge(POLICY), n)
    for load, noise in zip(common, jitter):
        rates = {}
        for r in range(n):
            share = min(0.97, max(0.0, load + noise[r]))
            runnable = cpu / (1 - share) if share < 1 else cpu
            rates[r] = (runnable * (1 - share), runnable * share)
        assert ranks.step(rates).named == ()


@pytest.mark.parametrize(
    ("text", "mode", "window"),
    [
        (None, "warn", 30.0),
        ("off", "off", 30.0),
        ("warn:10", "warn", 10.0),
        ("WARN", "warn", 30.0),
        ("replace:6", "replace", 6.0),
    ],
)
def test_parse(text: str, mode: str, window: float) -> None:
    policy = StragglerPolicy.parse(text)
    assert (policy.mode, policy.window) == (mode, window)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("loud", "expected off, warn or replace"),
        ("warn:1", "seconds from 3"),
        ("warn:x", "seconds from 3"),
    ],
)
def test_parse_refuses(text: str, says: str) -> None:
    with pytest.raises(PlanError, match=says) as err:
        StragglerPolicy.parse(text)
    assert err.value.field == "--straggler"


def test_a_rank_whose_send_queues_stay_full_is_named_for_its_link() -> None:
    judge = StragglerJudge(StragglerPolicy(window=6.0))
    t, cpu = 0.0, 0.0
    named = []
    for i in range(12):
        t, cpu = t + 1.0, cpu + 0.2
        queued = {0: 2000.0, 1: 0.0, 2: 900_000.0 if i >= 3 else 1000.0}
        update = judge.feed({r: Sample(t, cpu, 0.01 * t, queued[r]) for r in range(3)}, HOSTS, t)
        named += update.named
    (v,) = named
    assert (v.rank, v.kind) == (2, "link") and v.to_json()["by"] == "link"
    assert v.evidence.startswith("rank 2 on 10.0.0.3 kept ") and "KiB waiting in its TCP send queues" in v.evidence
    assert "(the other ranks 0-2 KiB): a slow link or receiver" in v.evidence


def test_between_two_ranks_a_full_send_queue_names_nobody() -> None:
    # the sender's queue stays full when its link is slow, and as well when its only peer reads
    # slowly: with no third rank to compare, the link rule says nothing (the CPU rule still judges)
    judge = StragglerJudge(StragglerPolicy(window=6.0))
    for i in range(1, 15):
        queued = {0: 0.0, 1: 900_000.0}
        assert judge.feed({r: Sample(i, 0.2 * i, 0.01 * i, queued[r]) for r in range(2)}, HOSTS, i) == Update()


def test_small_queues_name_nobody() -> None:
    judge = StragglerJudge(StragglerPolicy(window=6.0))
    for i in range(1, 15):
        queued = {0: 3000.0, 1: 0.0, 2: 40_000.0}  # under 64 KiB: a busy link, not a full one
        assert judge.feed({r: Sample(i, 0.2 * i, 0.01 * i, queued[r]) for r in range(3)}, HOSTS, i) == Update()


def test_the_sender_to_a_starved_rank_is_not_named_for_its_link() -> None:
    """Rank 1 starved of CPU reads slowly, so rank 0's queue to it stays full: rank 1 is named, rank 0 is not."""
    judge = StragglerJudge(StragglerPolicy(window=6.0))
    named = []
    for i in range(1, 15):
        figs = {0: (0.2 * i, 0.01 * i, 500_000.0), 1: (0.03 * i, 0.97 * i, 0.0), 2: (0.2 * i, 0.01 * i, 0.0)}
        named += judge.feed({r: Sample(i, c, d, q) for r, (c, d, q) in figs.items()}, HOSTS, i).named
    assert [(v.rank, v.kind) for v in named] == [(1, "cpu")]


def test_a_sample_given_again_confirms_nothing() -> None:
    """A host reports every 2 s, the judge looks every second: the same sample twice is one piece of evidence."""
    judge = StragglerJudge(StragglerPolicy(window=6.0, confirm=3))
    named, t = [], 0.0
    for i in range(1, 5):  # healthy: the window fills
        t = float(i)
        judge.feed({r: Sample(t, 0.3 * t, 0.05 * t) for r in range(3)}, HOSTS, t)
    figs = {r: (0.3 * t, 0.05 * t) for r in range(3)}
    for i in range(1, 9):
        if i % 2:  # a new sample every other look, rank 2 now starved
            t += 2.0
            figs = {r: (c + 0.6, d + (1.9 if r == 2 else 0.1)) for r, (c, d) in figs.items()}
        update = judge.feed({r: Sample(t, c, d) for r, (c, d) in figs.items()}, HOSTS, t)
        named.append([v.rank for v in update.named])
    first = next(i for i, n in enumerate(named) if n)
    assert named[first] == [2] and first >= 4, named  # three new samples, not three looks


def test_one_full_queue_in_one_sample_names_nobody() -> None:
    """On a busy machine a slow reader leaves one sender's queue full now and then: a rank is named
    for its link only when its queues stay full in most samples of the window."""
    judge = StragglerJudge(StragglerPolicy(window=6.0))
    for i in range(1, 30):
        queued = {r: 0.0 for r in range(3)}
        if i % 8 == 0:
            queued[i // 8 % 2] = 800_000.0  # one sample in eight, now rank 1, now rank 0
        assert judge.feed({r: Sample(i, 0.2 * i, 0.01 * i, queued[r]) for r in range(3)}, HOSTS, i) == Update()


@pytest.mark.parametrize(
    "busy, named",
    [
        (0.4, False),  # full whenever sampled, but its link drains between the bursts: not the bottleneck
        (0.79, False),
        (0.95, True),  # a link that is never idle
        (None, True),  # busy times unknown (another network namespace, no sock_diag): the queues decide
    ],
)
def test_a_full_queue_names_a_link_only_if_its_busiest_connection_is_never_idle(busy: float, named: bool) -> None:
    """A data-parallel rank sends its gradients in a burst each step; samples that meet one rank's
    bursts every time see its queue full in most of them.  The kernel's busy time of its busiest
    connection tells a bottleneck link (busy all the time) from such a sender."""
    judge = StragglerJudge(StragglerPolicy(window=6.0))
    got = []
    for i in range(1, 15):
        queued = {0: 0.0, 1: 0.0, 2: 300_000.0}
        link = {0: 0.35 * i, 1: 0.4 * i, 2: (busy if busy is not None else 0.0) * i}
        samples = {r: Sample(i, 0.2 * i, 0.01 * i, queued[r], link[r] if busy is not None else -1.0) for r in range(3)}
        got += judge.feed(samples, HOSTS, i).named
    assert [(v.rank, v.kind) for v in got] == ([(2, "link")] if named else [])
    if named:
        (v,) = got
        assert v.to_json()["link_busy"] == (pytest.approx(busy) if busy is not None else -1.0)
        says = f", its busiest connection sending {100 * busy:.0f} % of the time" if busy is not None else ""
        assert v.evidence == (
            f"rank 2 on 10.0.0.3 kept 293 KiB waiting in its TCP send queues over the last 5 s{says}"
            " (the other ranks 0 KiB): a slow link or receiver"
        )
