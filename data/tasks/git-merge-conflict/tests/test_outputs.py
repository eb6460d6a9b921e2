import json
import os
import subprocess
import sys

import pytest

# bounds a hung program (a clear failure), never a speed test: a slow machine passes too
TIMEOUT = 300

REPO = "/workspace/repo"
FIX = json.load(open(os.path.join(os.path.dirname(__file__), "fixture.json")))


def git(*args, check=True):
    r = subprocess.run(["git", "-c", "safe.directory=*", "-C", REPO, *args],
                       capture_output=True, text=True, timeout=TIMEOUT)
    if check:
        assert r.returncode == 0, r.stderr
    return r


def test_merge_commit_parents():
    assert git("symbolic-ref", "HEAD").stdout.strip() == "refs/heads/main"
    parents = git("rev-list", "--parents", "-n", "1", "HEAD").stdout.split()[1:]
    assert parents == [FIX["main_tip"], FIX["feature_tip"]], parents


def test_clean_state():
    assert git("status", "--porcelain", "--untracked-files=no").stdout == ""
    assert not os.path.exists(os.path.join(REPO, ".git", "MERGE_HEAD"))
    for name in git("ls-files").stdout.split():
        text = git("show", f"HEAD:{name}").stdout
        for marker in ("<<<<<<<", ">>>>>>>", "|||||||"):
            assert marker not in text, (name, marker)
        assert "\n=======\n" not in text, name


@pytest.fixture(scope="module")
def tool(tmp_path_factory):
    d = tmp_path_factory.mktemp("head")
    (d / "textstats.py").write_text(git("show", "HEAD:textstats.py").stdout)
    return str(d / "textstats.py")


SAMPLES = {
    "plain": "one two  three\nfour\n",
    "no_trailing_newline": "alpha beta\ngamma",
    "empty": "",
    "blank_lines": "\n\n  \n",
    "unicode": "h\u00e9llo w\u00f6rld \u2603\nzw\u00f6lf\n",
}


def expect(text, flags):
    lines = 0 if not text else text.count("\n") + (0 if text.endswith("\n") else 1)
    stats = {"chars": len(text), "words": len(text.split()), "lines": lines}
    chosen = [k for k in ("chars", "words", "lines") if f"--{k}" in flags] or ["chars", "words", "lines"]
    return "".join(f"{k}: {stats[k]}\n" for k in chosen)


FLAGS = [["--chars"], ["--words"], ["--lines"], ["--lines", "--chars"], ["--lines", "--words"]]


# every sample with no flag and with all three (in another order than printed), and every other
# choice of flags once, each with another sample
@pytest.mark.parametrize("sample,flags",
                         [(s, f) for s in sorted(SAMPLES) for f in ([], ["--words", "--lines", "--chars"])]
                         + [(s, FLAGS[i]) for i, s in enumerate(sorted(SAMPLES))])
def test_behaviour(tool, tmp_path, sample, flags):
    p = tmp_path / "in.txt"
    p.write_bytes(SAMPLES[sample].encode("utf-8"))
    r = subprocess.run([sys.executable, tool, str(p), *flags], capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    assert r.stdout == expect(SAMPLES[sample], flags)


def test_readme_documents_all_options():
    readme = git("show", "HEAD:README.md").stdout
    for opt in ("--chars", "--words", "--lines"):
        assert opt in readme
