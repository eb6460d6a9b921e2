#!/bin/bash
set -euo pipefail
cd /workspace
cat > roman.py <<'PY'
"""Convert between integers and Roman numerals."""
import sys

_TABLE = [
    (1000, "M"), (900, "CM"), (500, "D"), (400, "CD"),
    (100, "C"), (90, "XC"), (50, "L"), (40, "XL"),
    (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I"),
]

_VALUES = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}


def to_roman(n):
    """Return the canonical Roman numeral for n (1..3999)."""
    if isinstance(n, bool) or not isinstance(n, int):
        raise ValueError("not an integer: %r" % (n,))
    if n < 1 or n > 3999:
        raise ValueError("out of range: %r" % (n,))
    out = []
    for value, symbol in _TABLE:
        while n >= value:
            out.append(symbol)
            n -= value
    return "".join(out)


def from_roman(s):
    """Return the integer value of the canonical Roman numeral s."""
    if not isinstance(s, str) or not s:
        raise ValueError("empty or not a string: %r" % (s,))
    total = 0
    for i, ch in enumerate(s):
        if ch not in _VALUES:
            raise ValueError("invalid numeral: %r" % (s,))
        value = _VALUES[ch]
        if i + 1 < len(s) and s[i + 1] in _VALUES and _VALUES[s[i + 1]] > value:
            total -= value
        else:
            total += value
    if not 1 <= total <= 3999 or to_roman(total) != s:
        raise ValueError("non-canonical numeral: %r" % (s,))
    return total


def main(argv):
    if len(argv) != 2:
        print("usage: roman.py NUMBER|NUMERAL", file=sys.stderr)
        return 2
    arg = argv[1]
    try:
        if arg.isdigit():
            print(to_roman(int(arg)))
        else:
            print(from_roman(arg))
    except ValueError as exc:
        print("roman.py: %s" % exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
PY
