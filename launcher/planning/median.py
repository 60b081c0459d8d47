"""The median of some numbers, as :func:`statistics.median` computes it (the middle value, or the
mean of the two middle ones), without importing :mod:`statistics`: that module imports
``fractions``, ``decimal`` and ``random`` (about 20 ms), and every ``mslaunch`` command would pay
it for one function."""

from __future__ import annotations

from typing import Iterable, TypeVar, Union

__all__ = ["median"]

N = TypeVar("N", int, float)


def median(values: Iterable[N]) -> Union[N, float]:
    """The median of ``values``.

    Raises:
        ValueError: no values (as :func:`statistics.median`'s ``StatisticsError``, a ValueError).
    """
    data = sorted(values)
    n = len(data)
    if n == 0:
        raise ValueError("no median for empty data")
    mid = n // 2
    if n % 2:
        return data[mid]
    return (data[mid - 1] + data[mid]) / 2
