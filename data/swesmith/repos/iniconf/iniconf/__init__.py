"""Tiny INI reader with typed getters and ${...} interpolation."""
from .parser import Config, ParseError, load, loads

__all__ = ["Config", "ParseError", "load", "loads"]
__version__ = "0.5.1"
