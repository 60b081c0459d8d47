import random
import statistics

import pytest

from launcher.planning.median import median


def test_the_median_is_the_one_of_the_statistics_module() -> None:
    rnd = random.Random(7)
    for n in range(1, 40):
        ints = [rnd.randint(-50, 50) for _ in range(n)]
        floats = [rnd.uniform(-1e3, 1e3) for _ in range(n)]
        assert median(ints) == statistics.median(ints)
        assert median(iter(floats)) == statistics.median(floats)  # any iterable, read once
    assert median([3]) == 3 and median([1, 2]) == 1.5


def test_no_median_of_nothing() -> None:
    with pytest.raises(ValueError):
        median([])
