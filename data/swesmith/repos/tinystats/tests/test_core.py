import math

import pytest

from tinystats import (StatisticsError, describe, mean, median, mode, percentile, stdev, variance,
                       zscores)


def test_mean_basic():
    assert mean([1, 2, 3, 4]) == 2.5
    assert mean([5]) == 5


def test_mean_is_accurate():
    assert mean([0.1] * 10) == pytest.approx(0.1)
    assert mean([1e16, 1, -1e16]) == pytest.approx(1 / 3)


def test_mean_accepts_generators():
    assert mean(x for x in range(5)) == 2


def test_empty_data_raises():
    for fn in (mean, median, mode):
        with pytest.raises(StatisticsError):
            fn([])


def test_rejects_non_numbers():
    with pytest.raises(TypeError):
        mean([1, "2"])
    with pytest.raises(TypeError):
        median([True, 2])
    with pytest.raises(StatisticsError):
        mean([1.0, float("nan")])


def test_median_odd():
    assert median([3, 1, 2]) == 2
    assert median([7]) == 7


def test_median_even():
    assert median([3, 1, 4, 1, 5, 9]) == 3.5
    assert median([1, 2]) == 1.5
    assert median([10, 20, 30, 40]) == 25


def test_median_unsorted_negative():
    assert median([-5, 3, -1, 8]) == 1


def test_mode_ties_first_seen():
    assert mode([1, 2, 2, 3, 3]) == 2
    assert mode([5, 4, 4, 5]) == 5
    assert mode([1.5]) == 1.5


def test_variance_sample():
    assert variance([2, 4, 4, 4, 5, 5, 7, 9]) == pytest.approx(32 / 7)
    assert variance([1, 2]) == 0.5


def test_variance_population():
    assert variance([2, 4, 4, 4, 5, 5, 7, 9], sample=False) == 4
    assert variance([5], sample=False) == 0


def test_sample_variance_needs_two_points():
    with pytest.raises(StatisticsError):
        variance([1])


def test_stdev():
    assert stdev([2, 4, 4, 4, 5, 5, 7, 9], sample=False) == 2
    assert stdev([1, 2, 3, 4]) == pytest.approx(math.sqrt(5 / 3))


@pytest.mark.parametrize("p,want", [(0, 1), (25, 1.75), (50, 2.5), (75, 3.25), (100, 4)])
def test_percentile_linear(p, want):
    assert percentile([4, 1, 3, 2], p) == pytest.approx(want)


def test_percentile_single_value():
    assert percentile([42], 0) == 42
    assert percentile([42], 99) == 42


def test_percentile_range_checked():
    with pytest.raises(StatisticsError):
        percentile([1, 2], 101)
    with pytest.raises(StatisticsError):
        percentile([1, 2], -1)


def test_zscores():
    z = zscores([2, 4, 4, 4, 5, 5, 7, 9], sample=False)
    assert z[0] == pytest.approx(-1.5)
    assert z[-1] == pytest.approx(2)
    assert sum(z) == pytest.approx(0)


def test_zscores_zero_variance():
    with pytest.raises(StatisticsError):
        zscores([3, 3, 3])


def test_describe():
    d = describe([1, 2, 3, 4, 5])
    assert d == {"count": 5, "mean": 3, "stdev": pytest.approx(math.sqrt(2.5)), "min": 1,
                 "q1": 2, "median": 3, "q3": 4, "max": 5}


def test_describe_single():
    assert describe([7])["stdev"] == 0.0
