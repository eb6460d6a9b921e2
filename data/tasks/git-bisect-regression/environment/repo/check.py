#!/usr/bin/env python3
"""Regression checks for slug.py: exits 0 when every check passes."""
import sys

from slug import slugify

CASES = [
    ("Hello World", "hello-world"),
    ("  Hello,   World!  ", "hello-world"),
    ("Crème brûlée", "creme-brulee"),
    ("C'est la vie -- 2nd ed.", "c-est-la-vie-2nd-ed"),
    ("already-a-slug", "already-a-slug"),
    ("", ""),
]


def main():
    failed = 0
    for text, want in CASES:
        got = slugify(text)
        if got != want:
            print(f"FAIL slugify({text!r}) = {got!r}, want {want!r}")
            failed += 1
    print("ok" if not failed else f"{failed} check(s) failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
