"""Small descriptive statistics helpers."""
from .core import (StatisticsError, describe, mean, median, mode, percentile, stdev, variance,
                   zscores)

__all__ = ["StatisticsError", "describe", "mean", "median", "mode", "percentile", "stdev",
           "variance", "zscores"]
__version__ = "0.3.0"
