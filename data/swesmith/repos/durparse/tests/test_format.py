import re

import pytest

from durparse import format_duration, parse_duration


def _id(value):
    """Test ids without spaces or quotes (safe to pass on a command line)."""
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", str(value)) or "empty"


@pytest.mark.parametrize("seconds,want", ids=_id, argvalues=[
    (0, "0s"),
    (59, "59s"),
    (60, "1m"),
    (3600, "1h"),
    (3661, "1h 1m 1s"),
    (86400, "1d"),
    (93784, "1d 2h 3m 4s"),
    (90061, "1d 1h 1m 1s"),
    (-5400, "-1h 30m"),
    (59.6, "1m"),
])
def test_short(seconds, want):
    assert format_duration(seconds) == want


@pytest.mark.parametrize("seconds,want", ids=_id, argvalues=[
    (0, "0 seconds"),
    (1, "1 second"),
    (3600, "1 hour"),
    (3660, "1 hour and 1 minute"),
    (93784, "1 day, 2 hours, 3 minutes and 4 seconds"),
    (172800, "2 days"),
])
def test_long(seconds, want):
    assert format_duration(seconds, style="long") == want


@pytest.mark.parametrize("seconds,want", ids=_id, argvalues=[
    (0, "PT0S"),
    (86400, "P1D"),
    (93784, "P1DT2H3M4S"),
    (5400, "PT1H30M"),
    (-60, "-PT1M"),
])
def test_iso(seconds, want):
    assert format_duration(seconds, style="iso") == want


def test_max_units_truncates():
    assert format_duration(93784, max_units=2) == "1d 2h"
    assert format_duration(3599, max_units=1) == "59m"
    assert format_duration(3601, max_units=2) == "1h 1s"


def test_bad_arguments():
    with pytest.raises(ValueError):
        format_duration(1, style="fancy")
    with pytest.raises(ValueError):
        format_duration(1, max_units=0)


@pytest.mark.parametrize("seconds", ids=_id, argvalues=[0, 1, 59, 60, 61, 3599, 3600, 86399, 86400, 90061, 1000000])
def test_roundtrip(seconds):
    for style in ("short", "iso"):
        assert parse_duration(format_duration(seconds, style=style)) == seconds
