import os
import subprocess

import pytest

# bounds a hung program (a clear failure), never a speed test: a slow machine passes too
TIMEOUT = 300

SCRIPT = "/workspace/linecount.sh"


def expected(root):
    rows = []
    for dp, dns, fns in os.walk(root):
        for fn in fns:
            p = os.path.join(dp, fn)
            if fn.endswith(".txt") and os.path.isfile(p) and not os.path.islink(p):
                with open(p, "rb") as f:
                    n = f.read().count(b"\n")
                rows.append((n, os.path.relpath(p, root).encode()))
    rows.sort(key=lambda r: (-r[0], r[1]))
    out = b"".join(b"%d %s\n" % r for r in rows)
    return out + b"TOTAL %d\n" % sum(r[0] for r in rows)


def run(*args):
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/tmp"}
    return subprocess.run(["bash", SCRIPT, *args], stdin=subprocess.DEVNULL, capture_output=True,
                          timeout=TIMEOUT, env=env)


def write(path, nlines, tail=b""):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(b"x\n" * nlines + tail)


@pytest.fixture()
def tree(tmp_path):
    root = tmp_path / "my docs"
    files = {
        "a.txt": 3,
        "b.txt": 3,
        "notes with spaces.txt": 10,
        "-dash.txt": 1,
        "sub dir/deep/ x .txt": 7,
        "sub dir/*.txt": 2,
        "sub dir/[ab].txt": 5,
        "q?.txt": 0,
        "tab\tname.txt": 4,
        "it's \"quoted\".txt": 6,
        "UPPER.TXT": 50,
        "readme.md": 40,
        "a.txt.bak": 30,
        "z/zz/zzz/last.txt": 3,
    }
    for rel, n in files.items():
        write(os.path.join(root, rel), n)
    write(os.path.join(root, "nonl.txt"), 2, tail=b"no newline at end")
    os.makedirs(root / "dir.txt")  # a directory, not a file
    os.symlink(root / "notes with spaces.txt", root / "link.txt")
    return root


def test_tree(tree):
    before = sorted(os.listdir(tree))
    r = run(str(tree))
    assert r.returncode == 0, r.stderr
    assert r.stdout == expected(tree), r.stdout.decode()
    assert sorted(os.listdir(tree)) == before


def test_relative_dir_argument_with_trailing_slash(tree):
    # Path given with a trailing slash must still yield clean relative paths.
    r = run(str(tree) + "/")
    assert r.returncode == 0
    assert r.stdout == expected(tree)


def test_empty_dir(tmp_path):
    d = tmp_path / "empty one"
    d.mkdir()
    r = run(str(d))
    assert r.returncode == 0
    assert r.stdout == b"TOTAL 0\n"


def test_no_match_only_other_files(tmp_path):
    d = tmp_path / "other"
    write(str(d / "a.TXT"), 3)
    write(str(d / "b.text"), 3)
    r = run(str(d))
    assert r.returncode == 0 and r.stdout == b"TOTAL 0\n"


def test_bad_argument(tmp_path):
    for args in ([str(tmp_path / "missing")], [], ):
        r = run(*args)
        assert r.returncode == 2
        assert r.stdout == b""
        assert r.stderr != b""
    f = tmp_path / "file.txt"
    f.write_text("x\n")
    r = run(str(f))
    assert r.returncode == 2 and r.stdout == b""


def test_many_files(tmp_path):
    d = tmp_path / "many"
    for i in range(60):
        write(str(d / f"d{i % 7}" / f"f {i}.txt"), i % 13)
    r = run(str(d))
    assert r.returncode == 0
    assert r.stdout == expected(d)
