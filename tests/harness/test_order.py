"""The hand-out order of the tests (tests/harness/order.py): long tests, known by their own
``pytest.mark.cost`` marker, go first, spread over the workers by their seconds."""

from __future__ import annotations

import pytest

from tests.harness.order import cost_of, spread


class Item:
    """What :func:`spread` reads of a pytest item: its node id and its closest marker."""

    def __init__(self, nodeid: str, *args: object, **kwargs: object) -> None:
        self.nodeid = nodeid
        self.marker = pytest.mark.cost(*args, **kwargs).mark if (args or kwargs) else None

    def get_closest_marker(self, name: str):
        return self.marker if name == "cost" else None

    def __repr__(self) -> str:
        return self.nodeid


def short(n: int, module: str = "tests/a/test_short.py") -> list:
    return [Item(f"{module}::test_{i}") for i in range(n)]


def test_long_tests_head_the_workers_first_hand_outs_balanced_by_seconds():
    a, b, c = (
        Item("tests/x/test_x.py::test_a", 100),
        Item("tests/x/test_x.py::test_b", 60),
        Item("tests/y/test_y.py::test_c", 50),
    )
    items = short(10) + [c, a] + short(5, "tests/b/test_more.py") + [b]
    out = spread(items, 2)
    assert sorted(map(id, out)) == sorted(map(id, items))
    first, second = out[:9], out[9:]  # worksteal gives worker 0 the first 18 // 2 items
    assert first[0] is a and second[:2] == [b, c]  # 100 | 60 + 50
    assert [it for it in out if it.marker is None] == [
        it for it in items if it.marker is None
    ]  # the rest keep their order


def test_a_group_runs_on_one_worker_and_costs_the_sum_of_its_members():
    m1 = Item("tests/w/test_w.py::test_one", 40, group="runs")
    m2 = Item("tests/w/test_w.py::test_two", 40, group="runs")
    other_module = Item("tests/v/test_v.py::test_one", 70, group="runs")  # a group is per module
    lone = Item("tests/u/test_u.py::test_lone", 50)
    out = spread(short(20) + [m1, lone, other_module, m2], 2)
    assert out[:2] == [m1, m2]  # 80 s: the longest group, on worker 0, its members one after the other
    assert out[12:14] == [other_module, lone]  # worker 1: 70 + 50 = 120 s
    assert cost_of(m1) == cost_of(m2) == ("tests/w/test_w.py::[runs]", 40.0)
    assert cost_of(lone) == ("tests/u/test_u.py::test_lone", 50.0)


def test_a_renamed_long_test_keeps_its_place():
    """The seconds are on the test itself: whatever its id, it goes first."""
    for name in ("test_trainer", "test_trainer_renamed", "test_trainer[param-1]"):
        long = Item(f"tests/integration/test_new_place.py::{name}", 90)
        assert spread(short(30) + [long], 3)[0] is long


@pytest.mark.parametrize(
    "args,kwargs",
    [
        ((), {"group": "g"}),
        ((0,), {}),
        ((-5,), {}),
        (("100",), {}),
        ((True,), {}),
        ((10, 20), {}),
        ((10,), {"grup": "g"}),
    ],
)
def test_a_malformed_cost_marker_is_an_error_on_every_run(args, kwargs):
    bad = Item("tests/z/test_z.py::test_bad", *args, **kwargs)
    for workers in (1, 2, 4):
        with pytest.raises(
            ValueError, match=r"^tests/z/test_z.py::test_bad: write the cost marker as pytest.mark.cost\(SECONDS"
        ):
            spread(short(3) + [bad], workers)


def test_without_workers_or_long_tests_the_order_is_collection_order():
    items = short(6)
    assert spread(items, 4) == items
    items.append(Item("tests/x/test_x.py::test_long", 30))
    assert spread(items, 1) == items
