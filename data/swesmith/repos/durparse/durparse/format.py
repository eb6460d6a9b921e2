"""Duration formatting."""

_PARTS = [("d", "day", 86400), ("h", "hour", 3600), ("m", "minute", 60), ("s", "second", 1)]


def _split(seconds):
    seconds = int(round(seconds))
    out = []
    for short, long, size in _PARTS:
        value, seconds = divmod(seconds, size)
        out.append((short, long, value))
    return out


def format_duration(seconds, style="short", max_units=None):
    """Format a number of seconds.

    style="short": "1d 2h 3m 4s"; style="long": "1 day, 2 hours, 3 minutes and 4 seconds";
    style="iso": "P1DT2H3M4S". Zero-valued units are omitted; zero is "0s", "0 seconds" or
    "PT0S". Negative durations get a leading "-". Fractions are rounded to whole seconds.
    max_units keeps only the largest non-zero units (the rest is truncated, not rounded).
    """
    if style not in ("short", "long", "iso"):
        raise ValueError(f"unknown style: {style!r}")
    if max_units is not None and max_units < 1:
        raise ValueError("max_units must be >= 1")
    sign = "-" if seconds < 0 else ""
    parts = [p for p in _split(abs(seconds)) if p[2]]
    if max_units is not None:
        parts = parts[:max_units]
    if style == "iso":
        if not parts:
            return "PT0S"
        date = "".join(f"{v}D" for s, _, v in parts if s == "d")
        time = "".join(f"{v}{s.upper()}" for s, _, v in parts if s != "d")
        return sign + "P" + date + ("T" + time if time else "")
    if not parts:
        return "0s" if style == "short" else "0 seconds"
    if style == "short":
        return sign + " ".join(f"{v}{s}" for s, _, v in parts)
    words = [f"{v} {name}{'' if v == 1 else 's'}" for _, name, v in parts]
    if len(words) == 1:
        return sign + words[0]
    return sign + ", ".join(words[:-1]) + " and " + words[-1]
