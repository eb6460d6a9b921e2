"""Parse and format human-friendly durations."""
from .format import format_duration
from .parser import DurationError, parse_duration

__all__ = ["DurationError", "format_duration", "parse_duration"]
__version__ = "1.2.0"
