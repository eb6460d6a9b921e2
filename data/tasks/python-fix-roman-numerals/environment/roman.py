"""Convert between integers and Roman numerals."""
import sys

_TABLE = [
    (1000, "M"), (900, "CM"), (500, "D"), (400, "CD"),
    (100, "C"), (90, "XC"), (50, "L"), (40, "XL"),
    (10, "X"), (9, "IX"), (5, "V"), (1, "I"),
]

_VALUES = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}


def to_roman(n):
    """Return the Roman numeral for n (1..3999)."""
    if n < 0 or n > 3999:
        raise ValueError("out of range: %r" % (n,))
    out = []
    for value, symbol in _TABLE:
        while n >= value:
            out.append(symbol)
            n -= value
    return "".join(out)


def from_roman(s):
    """Return the integer value of the Roman numeral s."""
    total = 0
    for i, ch in enumerate(s):
        value = _VALUES[ch.upper()]
        if i + 1 < len(s) and _VALUES[s[i + 1].upper()] > value:
            total -= value
        else:
            total += value
    return total


def main(argv):
    if len(argv) != 2:
        print("usage: roman.py NUMBER|NUMERAL", file=sys.stderr)
        return 2
    arg = argv[1]
    if arg.isdigit():
        print(to_roman(int(arg)))
    else:
        print(from_roman(arg))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
