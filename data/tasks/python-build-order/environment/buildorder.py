#!/usr/bin/env python3
"""Compute a build order from a dependency file.

usage: buildorder.py DEPFILE [--target NAME]
"""
import sys


def parse(text):
    """Return {target: set(dependencies)} for the dependency file text."""
    raise NotImplementedError


def build_order(graph, target=None):
    """Return the list of targets in build order (see instruction.md)."""
    raise NotImplementedError


def main(argv):
    raise NotImplementedError


if __name__ == "__main__":
    sys.exit(main(sys.argv))
