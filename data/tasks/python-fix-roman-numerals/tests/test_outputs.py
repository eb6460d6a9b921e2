import importlib.util
import subprocess
import sys

import pytest

# bounds a hung program (a clear failure), never a speed test: a slow machine passes too
TIMEOUT = 300

MODULE = "/workspace/roman.py"


def load():
    spec = importlib.util.spec_from_file_location("roman_under_test", MODULE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def reference(n):
    digits = [("", "M", "MM", "MMM"),
              ("", "C", "CC", "CCC", "CD", "D", "DC", "DCC", "DCCC", "CM"),
              ("", "X", "XX", "XXX", "XL", "L", "LX", "LXX", "LXXX", "XC"),
              ("", "I", "II", "III", "IV", "V", "VI", "VII", "VIII", "IX")]
    return (digits[0][n // 1000] + digits[1][n // 100 % 10]
            + digits[2][n // 10 % 10] + digits[3][n % 10])


def test_to_roman_all_values():
    mod = load()
    for n in range(1, 4000):
        assert mod.to_roman(n) == reference(n), n


def test_from_roman_all_values():
    mod = load()
    for n in range(1, 4000):
        assert mod.from_roman(reference(n)) == n, n


@pytest.mark.parametrize("bad", [0, -1, 4000, 10 ** 6, 2.5, "7", True, None])
def test_to_roman_rejects(bad):
    mod = load()
    with pytest.raises(ValueError):
        mod.to_roman(bad)


@pytest.mark.parametrize("bad", ["", "IIII", "VX", "IC", "MMMM", "XM", "VV",
                                 "iv", "ABC", "MCMXCIV ", "IIX", "CMM", "DD", "IL"])
def test_from_roman_rejects(bad):
    mod = load()
    with pytest.raises(ValueError):
        mod.from_roman(bad)


def run(*args):
    return subprocess.run([sys.executable, MODULE, *args], capture_output=True,
                          text=True, timeout=TIMEOUT)


def test_cli():
    r = run("1994")
    assert r.returncode == 0 and r.stdout.strip() == "MCMXCIV"
    r = run("MMMCMXCIX")
    assert r.returncode == 0 and r.stdout.strip() == "3999"
    r = run("4")
    assert r.returncode == 0 and r.stdout.strip() == "IV"
    for bad in ("IIII", "0", "5000", "hello"):
        r = run(bad)
        assert r.returncode == 1, bad
        assert r.stdout.strip() == "", bad
        assert r.stderr.strip() != "", bad
