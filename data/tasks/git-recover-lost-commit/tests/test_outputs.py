import io
import json
import os
import subprocess
import sys
import tarfile

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


def test_on_main_branch():
    assert git("symbolic-ref", "HEAD").stdout.strip() == "refs/heads/main"


def test_history_not_rewritten():
    for h in FIX["kept"]:
        assert git("merge-base", "--is-ancestor", h, "main", check=False).returncode == 0, h


def test_lost_commit_restored_with_message_and_author():
    log = git("log", "--format=%H%x00%s%x00%an%x00%ae", "main").stdout.splitlines()
    hits = [l.split("\0") for l in log if l.split("\0")[1] == "Add CSV export"]
    assert hits, "no commit 'Add CSV export' on main"
    assert any(h[2] == "Ann Author" and h[3] == "ann@example.com" for h in hits)
    # It must come after the old tip (restored on top of the current history).
    assert any(git("merge-base", "--is-ancestor", FIX["main_before"], h[0], check=False).returncode == 0
               or h[0] == FIX["lost"] for h in hits)


def test_clean_worktree():
    st = git("status", "--porcelain", "--untracked-files=no").stdout
    assert st == "", st
    assert not os.path.exists(os.path.join(REPO, ".git", "CHERRY_PICK_HEAD"))
    assert not os.path.exists(os.path.join(REPO, ".git", "MERGE_HEAD"))


@pytest.fixture()
def inventory_mod(tmp_path):
    blob = git("show", "main:inventory.py").stdout
    (tmp_path / "inventory.py").write_text(blob)
    sys.path.insert(0, str(tmp_path))
    try:
        sys.modules.pop("inventory", None)
        import inventory
        yield inventory
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("inventory", None)


def test_features_work(inventory_mod):
    inv = inventory_mod.Inventory()
    inv.add("bolt", 12)
    inv.add("anchor,xl", 2)
    inv.add("nut", 3)
    inv.remove("bolt", 2)
    buf = io.StringIO()
    assert inv.export_csv(buf) == 3
    assert buf.getvalue() == 'sku,quantity\n"anchor,xl",2\nbolt,10\nnut,3\n'
    assert inv.low_stock(5) == ["anchor,xl", "nut"]
    assert inv.total() == 15


def test_worktree_matches_main():
    with open(os.path.join(REPO, "inventory.py")) as f:
        assert f.read() == git("show", "main:inventory.py").stdout
