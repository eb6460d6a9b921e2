import json
import os
import re
import subprocess
import sys
import tarfile
import io

import pytest

# bounds a hung program (a clear failure), never a speed test: a slow machine passes too
TIMEOUT = 300

REPO = "/workspace/repo"
FIX = json.load(open(os.path.join(os.path.dirname(__file__), "fixture.json")))


def git(*args, check=True, text=True):
    r = subprocess.run(["git", "-c", "safe.directory=*", "-C", REPO, *args],
                       capture_output=True, text=text, timeout=TIMEOUT)
    if check:
        assert r.returncode == 0, r.stderr
    return r


def extract(rev, dest):
    data = git("archive", "--format=tar", rev, text=False).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tf:
        tf.extractall(dest)
    return dest


def run_check(tmp_path, rev, script=None):
    d = extract(rev, tmp_path / rev[:12])
    if script is not None:
        (d / "check.py").write_text(script)
    r = subprocess.run([sys.executable, "check.py"], cwd=d, capture_output=True, text=True, timeout=TIMEOUT)
    return r.returncode


def original_check():
    return git("show", f"{FIX['v1.0']}:check.py").stdout


def first_bad():
    with open("/workspace/FIRST_BAD") as f:
        content = f.read()
    assert re.fullmatch(r"[0-9a-f]{40}\n?", content), repr(content)
    return content.strip()


def test_first_bad_commit_is_on_main_after_v1():
    h = first_bad()
    assert git("cat-file", "-t", h).stdout.strip() == "commit"
    assert git("merge-base", "--is-ancestor", FIX["v1.0"], h, check=False).returncode == 0
    assert git("merge-base", "--is-ancestor", h, FIX["main_before"], check=False).returncode == 0


def test_first_bad_commit_fails_and_parent_passes(tmp_path):
    h = first_bad()
    parent = git("rev-parse", h + "^").stdout.strip()
    script = original_check()
    assert run_check(tmp_path, h, script) != 0, "check.py passes at the named commit"
    assert run_check(tmp_path, parent, script) == 0, "check.py already fails at its parent"


def test_history_kept_and_branch():
    assert git("symbolic-ref", "HEAD").stdout.strip() == "refs/heads/main"
    for h in FIX["commits"]:
        assert git("merge-base", "--is-ancestor", h, "HEAD", check=False).returncode == 0, h
    assert git("rev-parse", "HEAD").stdout.strip() != FIX["main_before"], "no fix commit on main"


def test_no_bisect_and_clean():
    assert not os.path.exists(os.path.join(REPO, ".git", "BISECT_LOG"))
    assert git("status", "--porcelain", "--untracked-files=no").stdout == ""


def test_check_passes_at_head(tmp_path):
    assert run_check(tmp_path, "HEAD", original_check()) == 0


@pytest.fixture()
def slug(tmp_path):
    d = extract("HEAD", tmp_path / "head")
    sys.path.insert(0, str(d))
    sys.modules.pop("slug", None)
    try:
        import slug as mod
        yield mod
    finally:
        sys.path.remove(str(d))
        sys.modules.pop("slug", None)


def test_helpers_still_work(slug, tmp_path):
    s = slug
    assert s.slugify("Hello,   World!") == "hello-world"
    assert s.slugify("Ünïcode -- Test__Case", sep="_") == "unicode_test_case"
    assert s.slugify("a---b") == "a-b"
    assert s.unslugify("hello-big-world") == "Hello Big World"
    assert s.is_slug("hello-world") and not s.is_slug("hello--world") and not s.is_slug("Hello")
    assert s.truncate_slug("hello-big-world", 9) == "hello-big"
    assert s.truncate_slug("hello-big-world", 0) == ""
    assert s.unique_slug("Hello World", {"hello-world", "hello-world-2"}) == "hello-world-3"
    assert s.slug_path("My Blog", "First  Post!") == "my-blog/first-post"
    d = tmp_path / "head"
    r = subprocess.run([sys.executable, "slug.py"], cwd=d, input="Hello,  World\nA -- B\n",
                       capture_output=True, text=True, timeout=TIMEOUT)
    assert r.stdout == "hello-world\na-b\n"
