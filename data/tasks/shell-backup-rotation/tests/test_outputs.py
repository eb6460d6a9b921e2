import os
import random
import subprocess

import pytest

# bounds a hung program (a clear failure), never a speed test: a slow machine passes too
TIMEOUT = 300

SCRIPT = "/workspace/rotate.sh"


def run(*args):
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/tmp"}
    return subprocess.run(["bash", SCRIPT, *args], capture_output=True, text=True, timeout=TIMEOUT, env=env)


def make(dirpath, names, rng=None):
    os.makedirs(dirpath, exist_ok=True)
    for i, n in enumerate(names):
        p = os.path.join(dirpath, n)
        with open(p, "w") as f:
            f.write(n)
        # mtimes deliberately unrelated to the names
        t = 1_600_000_000 + (rng.randint(0, 10 ** 8) if rng else (len(names) - i) * 1000)
        os.utime(p, (t, t))


def expected_deletions(names, keep):
    backups = sorted(names)
    newest = {}
    for n in backups:
        newest[n[7:13]] = n
    kept = set(backups[len(backups) - keep:] if keep else [])
    kept |= set(newest.values())
    return [n for n in backups if n not in kept]


def stamp(rng):
    return "backup-%04d%02d%02d-%02d%02d%02d.tar.gz" % (
        rng.choice([2023, 2024]), rng.randint(1, 12), rng.randint(1, 28),
        rng.randint(0, 23), rng.randint(0, 59), rng.randint(0, 59))


DECOYS = ["backup-20230101-000000.tar.gz.part", "backup-2023-01-01.tar.gz", "notes.txt",
          "backup-20230101-00000.tar.gz", "Backup-20230101-000000.tar.gz", "backup-20230101-000000.tgz",
          "old backup-20230101-000000.tar.gz"]


def snapshot(d):
    return sorted(os.listdir(d))


@pytest.mark.parametrize("seed,keep", [(1, 3), (2, 0), (3, 10), (4, 1), (5, 100)])
def test_policy(tmp_path, seed, keep):
    rng = random.Random(seed)
    d = tmp_path / "backups dir"
    names = sorted({stamp(rng) for _ in range(40)})
    make(d, names + DECOYS, rng)
    os.mkdir(d / "backup-20240505-050505.tar.gz")  # a directory, not a backup
    os.mkdir(d / "sub")
    make(d / "sub", ["backup-20200101-000000.tar.gz"])
    os.symlink(d / names[0], d / "backup-20000101-000000.tar.gz")
    want = expected_deletions(names, keep)

    before = snapshot(d)
    r = run("--dry-run", str(d), str(keep))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == want
    assert snapshot(d) == before

    r = run(str(d), str(keep))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == want
    assert snapshot(d) == sorted(set(before) - set(want))
    assert os.path.exists(d / "sub" / "backup-20200101-000000.tar.gz")

    # Running again deletes nothing more.
    r = run(str(d), str(keep))
    assert r.returncode == 0 and r.stdout == ""


def test_month_boundaries(tmp_path):
    d = tmp_path / "b"
    names = ["backup-20240131-235959.tar.gz", "backup-20240201-000000.tar.gz",
             "backup-20240215-120000.tar.gz", "backup-20240229-235959.tar.gz",
             "backup-20240301-000001.tar.gz", "backup-20240301-000002.tar.gz",
             "backup-20240302-000000.tar.gz"]
    make(d, names)
    r = run(str(d), "1")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["backup-20240201-000000.tar.gz", "backup-20240215-120000.tar.gz",
                                     "backup-20240301-000001.tar.gz", "backup-20240301-000002.tar.gz"]


def test_empty_and_errors(tmp_path):
    d = tmp_path / "empty"
    d.mkdir()
    r = run(str(d), "5")
    assert r.returncode == 0 and r.stdout == ""
    make(tmp_path / "x", ["backup-20240101-000000.tar.gz", "backup-20240102-000000.tar.gz"])
    for args in ([str(tmp_path / "missing"), "1"], [str(tmp_path / "x"), "-1"], [str(tmp_path / "x"), "abc"],
                 [str(tmp_path / "x")], [str(tmp_path / "x"), ""]):
        r = run(*args)
        assert r.returncode == 2, args
        assert r.stdout == "" and r.stderr != ""
    assert len(os.listdir(tmp_path / "x")) == 2
