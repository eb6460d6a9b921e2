"""Descriptive statistics on sequences of numbers."""
import math
from collections import Counter


class StatisticsError(ValueError):
    """Raised for invalid input (e.g. empty data)."""


def _data(values, minimum=1):
    data = list(values)
    if len(data) < minimum:
        raise StatisticsError(f"need at least {minimum} data point(s), got {len(data)}")
    for x in data:
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            raise TypeError(f"not a number: {x!r}")
        if isinstance(x, float) and math.isnan(x):
            raise StatisticsError("NaN in data")
    return data


def mean(values):
    """Arithmetic mean."""
    data = _data(values)
    return math.fsum(data) / len(data)


def median(values):
    """Middle value; the mean of the two middle values for an even count."""
    data = sorted(_data(values))
    n = len(data)
    mid = n // 2
    if n % 2:
        return data[mid]
    return (data[mid - 1] + data[mid]) / 2


def mode(values):
    """Most common value; ties go to the value seen first."""
    data = _data(values)
    counts = Counter(data)
    best = max(counts.values())
    for x in data:
        if counts[x] == best:
            return x


def variance(values, sample=True):
    """Variance; the sample variance (n - 1 denominator) unless sample=False."""
    data = _data(values, 2 if sample else 1)
    m = math.fsum(data) / len(data)
    ss = math.fsum((x - m) ** 2 for x in data)
    return ss / (len(data) - 1 if sample else len(data))


def stdev(values, sample=True):
    """Standard deviation (square root of variance)."""
    return math.sqrt(variance(values, sample))


def percentile(values, p):
    """p-th percentile (0 <= p <= 100) with linear interpolation between ranks.

    Matches the default method of numpy.percentile ("linear"): the rank of the
    p-th percentile is p/100 * (n - 1) on the sorted data.
    """
    if not 0 <= p <= 100:
        raise StatisticsError(f"percentile out of range: {p}")
    data = sorted(_data(values))
    rank = p / 100 * (len(data) - 1)
    lo = math.floor(rank)
    hi = min(lo + 1, len(data) - 1)
    frac = rank - lo
    return data[lo] + (data[hi] - data[lo]) * frac


def zscores(values, sample=True):
    """Standard scores of every value."""
    data = _data(values, 2)
    m = mean(data)
    s = stdev(data, sample)
    if s == 0:
        raise StatisticsError("zero variance")
    return [(x - m) / s for x in data]


def describe(values):
    """Summary dict: count, mean, stdev, min, quartiles, max."""
    data = _data(values)
    return {
        "count": len(data),
        "mean": mean(data),
        "stdev": stdev(data) if len(data) > 1 else 0.0,
        "min": min(data),
        "q1": percentile(data, 25),
        "median": median(data),
        "q3": percentile(data, 75),
        "max": max(data),
    }
