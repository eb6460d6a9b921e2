"""Duration parsing: "1h30m", "2d 4h", "1.5h", "-90s", ISO 8601 "P1DT2H"."""
import re

UNITS = {
    "w": 7 * 24 * 3600,
    "d": 24 * 3600,
    "h": 3600,
    "m": 60,
    "s": 1,
    "ms": 0.001,
}

ALIASES = {
    "week": "w", "weeks": "w", "wk": "w",
    "day": "d", "days": "d",
    "hour": "h", "hours": "h", "hr": "h", "hrs": "h",
    "min": "m", "mins": "m", "minute": "m", "minutes": "m",
    "sec": "s", "secs": "s", "second": "s", "seconds": "s",
    "msec": "ms", "millisecond": "ms", "milliseconds": "ms",
}

_TOKEN = re.compile(r"\s*(\d+(?:\.\d+)?|\.\d+)\s*([a-z]+)\s*,?")
_ISO = re.compile(
    r"P(?:(?P<w>\d+(?:\.\d+)?)W)?(?:(?P<d>\d+(?:\.\d+)?)D)?"
    r"(?:T(?:(?P<h>\d+(?:\.\d+)?)H)?(?:(?P<m>\d+(?:\.\d+)?)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?"
)


class DurationError(ValueError):
    """Raised when a duration string cannot be parsed."""


def _number(text):
    return float(text) if "." in text else int(text)


def _normalise(total):
    if isinstance(total, float) and total.is_integer():
        return int(total)
    return total


def _parse_iso(text):
    m = _ISO.fullmatch(text)
    if not m or text in ("P", "PT") or text.endswith("T"):
        raise DurationError(f"invalid ISO 8601 duration: {text!r}")
    total = 0
    for unit in ("w", "d", "h", "m", "s"):
        value = m.group(unit)
        if value is not None:
            total += _number(value) * UNITS[unit]
    return total


def _parse_units(text):
    pos, total, seen = 0, 0, set()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise DurationError(f"cannot parse duration near {text[pos:]!r}")
        number, unit = m.group(1), m.group(2)
        unit = ALIASES.get(unit, unit)
        if unit not in UNITS:
            raise DurationError(f"unknown unit {m.group(2)!r}")
        if unit in seen:
            raise DurationError(f"unit {unit!r} given twice")
        seen.add(unit)
        total += _number(number) * UNITS[unit]
        pos = m.end()
    return total


def parse_duration(text):
    """Return the number of seconds described by text (int when exact)."""
    if not isinstance(text, str):
        raise TypeError("duration must be a string")
    s = text.strip()
    sign = 1
    if s[:1] in "+-" and s:
        sign = -1 if s[0] == "-" else 1
        s = s[1:].lstrip()
    if not s:
        raise DurationError("empty duration")
    if s[0] in "Pp":
        total = _parse_iso(s.upper())
    elif re.fullmatch(r"\d+", s):
        total = int(s)  # bare number: seconds
    else:
        total = _parse_units(s.lower())
    total = _normalise(total)
    if isinstance(total, float):
        total = round(total, 6)
    return sign * total
