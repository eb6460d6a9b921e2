import os
import shutil
import subprocess
import time

import pytest

# bounds a hung program (a clear failure), never a speed test: a slow machine passes too
TIMEOUT = 300

SRC = "/workspace/calc"


def make(d, *args):
    return subprocess.run(["make", *args], cwd=d, capture_output=True, text=True, timeout=TIMEOUT)


@pytest.fixture()
def proj(tmp_path):
    """Fresh copy of the project (sources + Makefile only) in scratch space."""
    d = tmp_path / "calc"
    shutil.copytree(SRC, d, symlinks=True,
                    ignore=shutil.ignore_patterns("build", "calc", "*.o", "*.d"))
    # Give every file an old, uniform timestamp so that later edits are "newer".
    settle(d)
    return d


T0 = time.time() - 3600


def settle(d):
    """After a build: sources at T0, objects at T0+10, executable at T0+20 (all in the past)."""
    for root, dirs, files in os.walk(d):
        for f in files:
            p = os.path.join(root, f)
            t = T0 + (20 if f == "calc" else 10 if os.sep + "build" + os.sep in p else 0)
            os.utime(p, (t, t))


def touch(path):
    t = T0 + 100
    os.utime(path, (t, t))


def mtimes(d):
    return {p: os.stat(d / "build" / p).st_mtime_ns for p in ("main.o", "lexer.o", "parser.o")}


def test_build_run_flags_and_up_to_date(proj):
    # one build serves three checks (a build is most of this verifier's time)
    r = make(proj)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (proj / "calc").is_file() and os.access(proj / "calc", os.X_OK)
    for name in ("main.o", "lexer.o", "parser.o"):
        assert (proj / "build" / name).is_file(), name
    compiles = [l for l in r.stdout.splitlines() if " -c " in l]
    assert len(compiles) == 3, r.stdout
    for l in compiles:
        assert "-Wall" in l and "-O2" in l, l
    for expr, out in [("1+2*3", "7"), ("(2+3)*4", "20"), ("100/7-3", "11"), ("-(4*-5)", "20")]:
        r = subprocess.run([str(proj / "calc"), expr], capture_output=True, text=True, timeout=TIMEOUT)
        assert r.returncode == 0 and r.stdout.strip() == out, (expr, r.stdout, r.stderr)
    r = subprocess.run([str(proj / "calc"), "1/0"], capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 1
    assert make(proj, "-q").returncode == 0
    r = make(proj)
    assert r.returncode == 0 and " -c " not in r.stdout


def test_header_change_rebuilds_dependents(proj):
    assert make(proj).returncode == 0
    settle(proj)
    before = mtimes(proj)
    touch(proj / "src" / "lexer.h")  # included by lexer.c, and via parser.h by parser.c and main.c
    assert make(proj, "-q").returncode != 0
    r = make(proj)
    assert r.returncode == 0, r.stderr
    after = mtimes(proj)
    assert all(after[k] > before[k] for k in before), (before, after)
    assert make(proj, "-q").returncode == 0


def test_source_change_rebuilds_only_that_object(proj):
    assert make(proj).returncode == 0
    settle(proj)
    before = mtimes(proj)
    calc_before = os.stat(proj / "calc").st_mtime_ns
    touch(proj / "src" / "lexer.c")
    r = make(proj)
    assert r.returncode == 0, r.stderr
    after = mtimes(proj)
    assert after["lexer.o"] > before["lexer.o"]
    assert after["main.o"] == before["main.o"] and after["parser.o"] == before["parser.o"]
    assert os.stat(proj / "calc").st_mtime_ns > calc_before


def test_clean_and_phony(proj):
    assert make(proj, "clean").returncode == 0  # nothing built yet
    assert make(proj).returncode == 0
    (proj / "clean").write_text("")  # a file named like the target must not matter
    (proj / "all").write_text("")
    r = make(proj, "clean")
    assert r.returncode == 0, r.stderr
    assert not (proj / "build").exists() and not (proj / "calc").exists()
    r = make(proj, "all")
    assert r.returncode == 0 and (proj / "calc").exists()


def test_make_test_target(proj):
    r = make(proj, "test")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "7" in r.stdout.split()
