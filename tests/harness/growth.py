"""Work counts for scale guards: how many Python steps a call takes, whatever the machine's load.

A guard of a scale promise (docs/benchmarks.md) runs a pure function on two sizes of input, in
one process, and compares the steps each took (:func:`steps`: the line and call events of
``sys.settrace``, so a loop in a comprehension or a generator counts as a loop in a ``for``):
linear work grows by the size factor, a quadratic one by its square.  No clock is read, so a
busy machine changes nothing; the count misses work done inside C (``x in some_list``), which
the promises' benchmarks in bench/ still time.
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Tuple


def steps(fn: Callable[[], Any]) -> Tuple[int, Any]:
    """``fn()``'s result and the Python steps it took (line and call events of its frames and those it calls)."""
    count = 0

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        nonlocal count
        count += 1
        return tracer

    previous = sys.gettrace()
    sys.settrace(tracer)
    try:
        out = fn()
    finally:
        sys.settrace(previous)
    return count, out


def growth(make: Callable[[int], Callable[[], Any]], small: int, factor: int) -> Tuple[float, int, int]:
    """How the steps of ``make(n)()`` grow from ``n = small`` to ``n = small * factor``: their ratio
    and both counts (the inputs are built by ``make``, outside the count; a first, uncounted
    run at the small size does the one-time work: imports, compiled patterns, caches)."""
    make(small)()
    work_small, _ = steps(make(small))
    work_big, _ = steps(make(small * factor))
    return work_big / work_small, work_small, work_big


def assert_linear(make: Callable[[int], Callable[[], Any]], small: int, factor: int = 4, slack: float = 1.25) -> None:
    """Fail unless the work of ``make(n)()`` grows at most ``slack`` times faster than ``n``
    (linear: ``factor``; quadratic: about ``factor ** 2``)."""
    ratio, a, b = growth(make, small, factor)
    assert ratio <= factor * slack, (
        f"work grew {ratio:.1f}x for {factor}x the input ({a} -> {b} Python steps, "
        f"n={small} -> {small * factor}): linear is at most {factor}x, quadratic about {factor**2}x"
    )
