import base64
import os
import random
import shutil
import subprocess

import pytest

# bounds a hung program (a clear failure), never a speed test: a slow machine passes too
TIMEOUT = 300

SRC = "/workspace/b64"


@pytest.fixture(scope="module")
def exe(tmp_path_factory):
    d = tmp_path_factory.mktemp("build") / "b64"
    shutil.copytree(SRC, d, ignore=shutil.ignore_patterns("*.o", "b64"))
    r = subprocess.run(["make"], cwd=d, capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert os.access(d / "b64", os.X_OK)
    return str(d / "b64")


def run(exe, mode, data):
    return subprocess.run([exe, mode], input=data, capture_output=True, timeout=TIMEOUT)


def test_encode_known_vectors(exe):
    for raw, enc in [(b"", b""), (b"f", b"Zg=="), (b"fo", b"Zm8="), (b"foo", b"Zm9v"),
                     (b"foob", b"Zm9vYg=="), (b"fooba", b"Zm9vYmE="), (b"foobar", b"Zm9vYmFy")]:
        r = run(exe, "-e", raw)
        assert r.returncode == 0
        assert r.stdout == enc + b"\n", raw


def test_roundtrip_random_binary(exe):
    rng = random.Random(1234)
    for n in list(range(0, 70)) + [1000, 4095, 4096, 4097, 100001]:
        raw = bytes(rng.getrandbits(8) for _ in range(n))
        r = run(exe, "-e", raw)
        assert r.returncode == 0
        assert r.stdout == base64.b64encode(raw) + b"\n", n
        d = run(exe, "-d", r.stdout)
        assert d.returncode == 0, n
        assert d.stdout == raw, n


def test_decode_ignores_whitespace(exe):
    raw = bytes(range(256)) * 3
    enc = base64.encodebytes(raw)  # wrapped at 76 columns
    enc = enc.replace(b"\n", b"\r\n").replace(b"A", b" A\t", 5)
    r = run(exe, "-d", enc)
    assert r.returncode == 0
    assert r.stdout == raw


@pytest.mark.parametrize("bad", [b"Zg=", b"Zm9", b"Zm9v!", b"Zm9v\x00AAA", b"Z===", b"Zg==Zg==",
                                 b"Zg=a", b"=Zg=", b"Zm9vYmFy=", b"Zm-v"])
def test_decode_rejects_invalid(exe, bad):
    r = run(exe, "-d", bad)
    assert r.returncode == 1, bad
    assert r.stderr.strip() != b""


def test_usage(exe):
    for args in ([], ["-x"], ["-e", "-d"]):
        r = subprocess.run([exe, *args], input=b"", capture_output=True, timeout=TIMEOUT)
        assert r.returncode == 2
