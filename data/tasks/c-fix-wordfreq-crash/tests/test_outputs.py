import collections
import os
import random
import re
import shutil
import subprocess

import pytest

# bounds a hung program (a clear failure), never a speed test: a slow machine passes too
TIMEOUT = 300

SRC = "/workspace/wordfreq"


@pytest.fixture(scope="module")
def binary(tmp_path_factory):
    """Build a fresh copy of the sources in scratch space (never in /workspace)."""
    d = tmp_path_factory.mktemp("build") / "wordfreq"
    shutil.copytree(SRC, d, ignore=shutil.ignore_patterns("*.o", "wordfreq"))
    r = subprocess.run(["make"], cwd=d, capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stdout + r.stderr
    exe = d / "wordfreq"
    assert os.access(exe, os.X_OK)
    return str(exe)


def expected(data: bytes, limit=10):
    words = re.findall(rb"[A-Za-z]+", data)
    cnt = collections.Counter(w.lower() for w in words)
    rows = sorted(cnt.items(), key=lambda kv: (-kv[1], kv[0]))
    if limit:
        rows = rows[:limit]
    return b"".join(b"%d %s\n" % (n, w) for w, n in rows)


def run(exe, data: bytes, *args):
    r = subprocess.run([exe, *args], input=data, capture_output=True, timeout=TIMEOUT)
    assert r.returncode == 0, (r.returncode, r.stderr[-500:])
    return r.stdout


def test_small_example(binary):
    data = b"The cat and the hat.\nTHE END, the end!\n"
    assert run(binary, data, "3") == b"4 the\n2 end\n1 and\n"
    assert run(binary, data) == expected(data)


def test_empty_input(binary):
    assert run(binary, b"") == b""
    assert run(binary, b"123 456 !!!\n", "0") == b""


def test_long_words(binary):
    rng = random.Random(7)
    long1 = "".join(rng.choice("abcdefghij") for _ in range(5000)).encode()
    long2 = b"Z" * 100 + b"q" * 300
    data = b" ".join([long1, b"short", long2, long1.upper(), b"short"]) + b"\n"
    assert run(binary, data, "0") == expected(data, 0)


def test_many_distinct_words(binary):
    rng = random.Random(11)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab = ["".join(rng.choice(letters) for _ in range(rng.randint(3, 12))) for _ in range(30000)]
    words = [rng.choice(vocab) for _ in range(200000)] + vocab
    seps = [" ", "\n", ", ", ". ", "\t", "--", "7"]
    data = "".join(w + rng.choice(seps) for w in words).encode()
    assert run(binary, data, "50") == expected(data, 50)
    assert run(binary, data, "0") == expected(data, 0)


def test_mixed_bytes_and_ties(binary):
    data = b"b a c\xc3\xa9t\xff\x00B A\r\nC\x7fa"
    assert run(binary, data, "0") == expected(data, 0)
    assert run(binary, data, "2") == expected(data, 2)
