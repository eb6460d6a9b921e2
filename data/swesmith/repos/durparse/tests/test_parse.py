import re

import pytest

from durparse import DurationError, parse_duration


def _id(value):
    """Test ids without spaces or quotes (safe to pass on a command line)."""
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", str(value)) or "empty"


@pytest.mark.parametrize("text,want", ids=_id, argvalues=[
    ("90", 90),
    ("90s", 90),
    ("1h30m", 5400),
    ("1h 30m", 5400),
    ("2d 4h", 187200),
    ("1w", 604800),
    ("1.5h", 5400),
    ("250ms", 0.25),
    ("1m 0.5s", 60.5),
    (".5m", 30),
])
def test_unit_strings(text, want):
    assert parse_duration(text) == want


def test_result_types():
    assert isinstance(parse_duration("1.5h"), int)
    assert isinstance(parse_duration("1.25s"), float)


@pytest.mark.parametrize("text,want", ids=_id, argvalues=[
    ("3 hours, 2 minutes", 10920),
    ("1 day 1 sec", 86401),
    ("2 Weeks", 1209600),
    ("10 Mins", 600),
])
def test_long_unit_names(text, want):
    assert parse_duration(text) == want


def test_sign():
    assert parse_duration("-90s") == -90
    assert parse_duration("+ 1m") == 60
    assert parse_duration("-PT1M") == -60


@pytest.mark.parametrize("text,want", ids=_id, argvalues=[
    ("PT1H30M", 5400),
    ("P1D", 86400),
    ("P1DT2H", 93600),
    ("P2W", 1209600),
    ("PT45S", 45),
    ("PT1.5S", 1.5),
    ("pt10m", 600),
])
def test_iso8601(text, want):
    assert parse_duration(text) == want


def test_iso_minutes_after_hours():
    assert parse_duration("PT2H5M") == 7500
    assert parse_duration("P1DT1M") == 86460


@pytest.mark.parametrize("text", ids=_id, argvalues=["", "   ", "-", "abc", "5 parsecs", "1h 1h", "P", "PT", "P1DT",
                                  "P1Y", "1h30", "h"])
def test_invalid(text):
    with pytest.raises(DurationError):
        parse_duration(text)


def test_type_error():
    with pytest.raises(TypeError):
        parse_duration(90)
