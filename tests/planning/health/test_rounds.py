"""The health check's pure logic: pairing rounds, medians, verdicts and their one-line reasons."""

from __future__ import annotations

import json

from launcher.planning.health.rounds import (
    Transfer,
    confirm_pairs,
    health_json,
    judge,
    round1_pairs,
    round2_pairs,
    slow_members,
)

HOSTS = ["h1", "h2", "h3", "h4", "h5"]
FAST = {h: 10.0 for h in HOSTS}


def test_round1_pairs_in_order_and_the_odd_host_out() -> None:
    assert round1_pairs(["a", "b", "c", "d"]) == ([("a", "b"), ("c", "d")], None)
    assert round1_pairs(["a", "b", "c"]) == ([("a", "b")], "c")
    assert round1_pairs(["a"]) == ([], "a")


def test_slow_pairs_are_below_the_threshold_of_the_median() -> None:
    ts = [Transfer("h1", "h2", 1.0), Transfer("h3", "h4", 100.0), Transfer("h5", "h6", 90.0)]
    assert slow_members(ts, 0.5) == (["h1", "h2"], ["h3", "h4", "h5", "h6"])
    assert slow_members(ts, 0.001) == ([], ["h1", "h2", "h3", "h4", "h5", "h6"])


def test_round2_pairs_each_candidate_with_a_distinct_fast_host() -> None:
    assert round2_pairs(["h1", "h2", "h5"], ["h3", "h4"]) == [("h1", "h3"), ("h2", "h4")]


def test_round2_clears_the_healthy_member_of_a_slow_pair() -> None:
    ts = [
        Transfer("h1", "h2", 1.0),
        Transfer("h3", "h4", 100.0),
        Transfer("h1", "h3", 95.0, 2),
        Transfer("h2", "h4", 1.1, 2),
    ]
    v = {x.host: x for x in judge(HOSTS[:4], FAST, {}, ts)}
    assert [v[h].status for h in HOSTS[:4]] == ["ok", "slow", "ok", "ok"]
    assert v["h2"].reason == ("slow: network 1.1 MB/s (with h1 in round 1, h4 in round 2), median 50.5; threshold 0.5")
    assert v["h1"].mbps == 95.0


def test_round3_confirms_a_host_still_slow_with_a_partner_it_has_not_met() -> None:
    """The odd host's one round-2 transfer was slow (a busy moment): it sends once more, to a fast
    host other than its round-2 partner; its best figure clears it."""
    ts = [Transfer("h1", "h2", 500.0), Transfer("h3", "h4", 480.0), Transfer("h5", "h1", 180.0, 2)]
    assert confirm_pairs(HOSTS, ts, 0.5) == [("h5", "h2")]
    assert [v.status for v in judge(HOSTS, FAST, {}, ts)] == ["ok", "ok", "ok", "ok", "slow"]
    ts.append(Transfer("h5", "h2", 470.0, 3))
    assert confirm_pairs(HOSTS, ts, 0.5) == []
    assert all(v.ok for v in judge(HOSTS, FAST, {}, ts))


def test_round3_spreads_slow_hosts_over_fast_ones_and_skips_dead_links() -> None:
    ts = [
        Transfer("h1", "h2", 1.0),
        Transfer("h3", "h4", 100.0),
        Transfer("h1", "h3", 1.2, 2),
        Transfer("h2", "h4", 1.1, 2),
        Transfer("h5", "h3", 0.0, 2, error="connection refused"),
    ]
    assert confirm_pairs(HOSTS, ts, 0.5) == [("h1", "h4"), ("h2", "h3")]
    # a host none of whose transfers worked is faulty, not re-measured; no fast host: nothing to pair
    assert confirm_pairs(["h1", "h2"], [Transfer("h1", "h2", 1.0)], 0.5) == []
    v = {x.host: x for x in judge(HOSTS, FAST, {}, ts + [Transfer("h1", "h4", 0.9, 3), Transfer("h2", "h3", 1.3, 3)])}
    assert v["h5"].status == "faulty" and v["h1"].status == v["h2"].status == "slow"
    assert "h4 in round 3" in v["h1"].reason


def test_round2_figures_do_not_raise_the_bar() -> None:
    """A pair a bit below the rest, not slow in round 1, stays ok although round 2 ran faster."""
    ts = [Transfer("h1", "h2", 195.0), Transfer("h3", "h4", 413.0), Transfer("h5", "h1", 900.0, 2)]
    assert all(v.ok for v in judge(HOSTS, FAST, {}, ts))


def test_compute_slow_faulty_and_ok_in_one_verdict_list() -> None:
    g = {"h1": 0.9, "h2": 7.5, "h3": 7.4, "h4": 8.0, "h5": None}
    v = judge(HOSTS, g, {"h5": "ssh: connection refused"}, [], 0.5, network=False)
    assert [x.status for x in v] == ["slow", "ok", "ok", "ok", "faulty"]
    assert v[0].line() == "h1 slow: compute 0.90 GFLOPS, median 7.45; threshold 0.5"
    assert v[1].reason == "ok: compute 7.50 GFLOPS, network not checked"
    assert v[4].reason == "faulty: ssh: connection refused"


def test_the_threshold_decides() -> None:
    g = {"h1": 4.0, "h2": 10.0, "h3": 10.0}
    assert [x.status for x in judge(HOSTS[:3], g, {}, [], 0.5, network=False)] == ["slow", "ok", "ok"]
    assert [x.status for x in judge(HOSTS[:3], g, {}, [], 0.3, network=False)] == ["ok", "ok", "ok"]


def test_a_faulty_host_does_not_move_the_median() -> None:
    g = {"h1": 10.0, "h2": 10.0, "h3": 0.0}
    v = judge(HOSTS[:3], g, {"h3": "compute: no answer in time"}, [], 0.5, network=False)
    assert [x.status for x in v] == ["ok", "ok", "faulty"]


def test_health_json_shape() -> None:
    ts = [Transfer("h1", "h2", 1.0), Transfer("h3", "h4", 100.0, error=None)]
    v = judge(HOSTS[:4], FAST, {}, ts)
    data = json.loads(json.dumps(health_json(v, kernel="numpy", threshold=0.5, seconds=3.21)))
    assert set(data) == {"ok", "kernel", "threshold", "seconds", "median", "network", "hosts"}
    assert data["ok"] is False and data["median"] == {"gflops": 10.0, "mbps": 50.5}
    assert data["hosts"][0] == {
        "host": "h1",
        "verdict": "slow",
        "gflops": 10.0,
        "mbps": 1.0,
        "reason": v[0].reason,
        "transfers": [{"a": "h1", "b": "h2", "round": 1, "mbps": 1.0}],
    }


def test_a_host_no_transfer_of_which_worked_is_faulty() -> None:
    """h1 refuses connections: both its rounds fail; its round-1 partner is cleared in round 2."""
    ts = [
        Transfer("h1", "h2", 0.0, 1, "h2: ConnectionRefusedError: [Errno 111] Connection refused"),
        Transfer("h3", "h4", 100.0),
        Transfer("h1", "h3", 0.0, 2, "h3: ConnectionRefusedError: [Errno 111] Connection refused"),
        Transfer("h2", "h4", 98.0, 2),
    ]
    v = judge(HOSTS[:4], FAST, {}, ts)
    assert [x.status for x in v] == ["faulty", "ok", "ok", "ok"]
    assert v[0].reason == "faulty: network: h3: ConnectionRefusedError: [Errno 111] Connection refused"
