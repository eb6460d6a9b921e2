#!/usr/bin/env python3
"""Regenerate the git repositories used by the git TB2 tasks (python3 stdlib + git).

Each task gets
    environment/repo/         the checked-out working tree
    environment/repo-dotgit/  the repository's .git directory (stored under another
                              name because git cannot track a nested ".git"; the
                              Dockerfile copies it to /workspace/repo/.git/)
    tests/fixture.json        commit ids the verifier needs

Authors, committers and dates are fixed, so commit ids are identical on every run.
Usage: python3 data/generators/make_git_fixtures.py [TASK_ID ...]
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

DATA = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TASKS = os.path.join(DATA, "tasks")
BASE_TIME = 1735725600  # 2025-01-01T10:00:00Z


class Repo:
    def __init__(self, path):
        self.path = path
        self.tick = 0
        os.makedirs(path)
        self.git("init", "-q", "--template=", "-b", "main")
        self.git("config", "user.name", "Dev Eloper")
        self.git("config", "user.email", "dev@example.com")
        self.git("config", "core.autocrlf", "false")
        self.git("config", "gc.auto", "0")

    def env(self, author=None):
        t = BASE_TIME + self.tick * 3600
        name, email = author or ("Dev Eloper", "dev@example.com")
        e = dict(os.environ)
        e.update({
            "GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email,
            "GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email,
            "GIT_AUTHOR_DATE": f"@{t} +0000", "GIT_COMMITTER_DATE": f"@{t} +0000",
            "GIT_CONFIG_NOSYSTEM": "1", "HOME": self.path, "LC_ALL": "C", "TZ": "UTC",
        })
        return e

    def git(self, *args, check=True, author=None):
        r = subprocess.run(["git", *args], cwd=self.path, env=self.env(author),
                           capture_output=True, text=True)
        if check and r.returncode != 0:
            raise SystemExit(f"git {' '.join(args)} failed: {r.stderr}")
        return r.stdout.strip()

    def write(self, rel, text):
        p = os.path.join(self.path, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)

    def commit(self, message, files=None, author=None):
        self.tick += 1
        for rel, text in (files or {}).items():
            self.write(rel, text)
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message, author=author)
        return self.git("rev-parse", "HEAD")

    def export(self, task_id, fixture):
        env_dir = os.path.join(TASKS, task_id, "environment")
        wt, gd = os.path.join(env_dir, "repo"), os.path.join(env_dir, "repo-dotgit")
        for d in (wt, gd):
            shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(os.path.join(self.path, ".git"), gd)
        for junk in ("hooks", "description", "info", "COMMIT_EDITMSG", "FETCH_HEAD"):
            p = os.path.join(gd, junk)
            if os.path.isdir(p):
                shutil.rmtree(p)
            elif os.path.exists(p):
                os.remove(p)
        shutil.copytree(self.path, wt, ignore=shutil.ignore_patterns(".git"))
        # The copied index keeps stale stat data; git refreshes it transparently.
        with open(os.path.join(TASKS, task_id, "tests", "fixture.json"), "w") as f:
            json.dump(fixture, f, indent=2, sort_keys=True)
            f.write("\n")


# --------------------------------------------------------------------------
# git-recover-lost-commit
# --------------------------------------------------------------------------
INVENTORY_V1 = '''"""A tiny stock inventory."""


class Inventory:
    """Quantities of items, keyed by SKU."""

    def __init__(self):
        self._items = {}

    def add(self, sku, qty=1):
        if qty <= 0:
            raise ValueError("qty must be positive")
        self._items[sku] = self._items.get(sku, 0) + qty

    def remove(self, sku, qty=1):
        have = self._items.get(sku, 0)
        if qty <= 0 or qty > have:
            raise ValueError("cannot remove %d of %s" % (qty, sku))
        if qty == have:
            del self._items[sku]
        else:
            self._items[sku] = have - qty

    def quantity(self, sku):
        return self._items.get(sku, 0)

    def total(self):
        return sum(self._items.values())

    def skus(self):
        return sorted(self._items)
'''

EXPORT_METHOD = '''
    def export_csv(self, fileobj):
        """Write "sku,quantity" rows (header first, SKUs sorted) to fileobj."""
        writer = csv.writer(fileobj, lineterminator="\\n")
        writer.writerow(["sku", "quantity"])
        for sku in self.skus():
            writer.writerow([sku, self._items[sku]])
        return len(self._items)
'''

LOW_STOCK_METHOD = '''
    def low_stock(self, threshold):
        """SKUs whose quantity is below threshold, sorted."""
        return [sku for sku in self.skus() if self._items[sku] < threshold]
'''


def make_recover():
    tmp = tempfile.mkdtemp()
    r = Repo(os.path.join(tmp, "repo"))
    c1 = r.commit("Initial inventory module", {"inventory.py": INVENTORY_V1})
    c2 = r.commit("Add README", {"README.md": "# inventory\n\nA tiny stock inventory libary.\n"})
    with_export = INVENTORY_V1.replace('"""A tiny stock inventory."""\n',
                                       '"""A tiny stock inventory."""\nimport csv\n')
    with_export = with_export.replace("    def total(self):", EXPORT_METHOD.lstrip("\n") + "\n    def total(self):")
    lost = r.commit("Add CSV export", {"inventory.py": with_export}, author=("Ann Author", "ann@example.com"))
    r.tick += 1
    r.git("reset", "-q", "--hard", "HEAD~1")
    c4 = r.commit("Fix typo in README", {"README.md": "# inventory\n\nA tiny stock inventory library.\n"})
    c5 = r.commit("Add low-stock report", {"inventory.py": INVENTORY_V1 + LOW_STOCK_METHOD})
    r.export("git-recover-lost-commit", {"lost": lost, "main_before": c5, "kept": [c1, c2, c4, c5]})
    shutil.rmtree(tmp)


# --------------------------------------------------------------------------
# git-merge-conflict
# --------------------------------------------------------------------------
TEXTSTATS_BASE = '''#!/usr/bin/env python3
"""Print simple statistics about a text file."""
import argparse
import sys


def count_chars(text):
    return len(text)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("path")
    parser.add_argument("--chars", action="store_true", help="number of characters")
    args = parser.parse_args(argv)

    with open(args.path, encoding="utf-8") as f:
        text = f.read()

    show_all = not args.chars
    if args.chars or show_all:
        print(f"chars: {count_chars(text)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''

README_BASE = '''# textstats

Usage: `python3 textstats.py PATH [--chars]`

Options:

- `--chars`: number of characters

Without options every statistic is printed.
'''


def make_merge():
    tmp = tempfile.mkdtemp()
    r = Repo(os.path.join(tmp, "repo"))
    r.commit("Add textstats tool", {"textstats.py": TEXTSTATS_BASE, "README.md": README_BASE})
    r.git("branch", "feature/lines")

    words = TEXTSTATS_BASE.replace(
        "def count_chars(text):\n    return len(text)\n",
        "def count_chars(text):\n    return len(text)\n\n\n"
        "def count_words(text):\n    \"\"\"Whitespace-separated words.\"\"\"\n    return len(text.split())\n")
    words = words.replace(
        '    parser.add_argument("--chars", action="store_true", help="number of characters")\n',
        '    parser.add_argument("--chars", action="store_true", help="number of characters")\n'
        '    parser.add_argument("--words", action="store_true", help="number of words")\n')
    words = words.replace(
        "    show_all = not args.chars\n    if args.chars or show_all:\n"
        "        print(f\"chars: {count_chars(text)}\")\n",
        "    show_all = not (args.chars or args.words)\n    if args.chars or show_all:\n"
        "        print(f\"chars: {count_chars(text)}\")\n    if args.words or show_all:\n"
        "        print(f\"words: {count_words(text)}\")\n")
    readme_words = README_BASE.replace("[--chars]", "[--chars] [--words]").replace(
        "- `--chars`: number of characters\n",
        "- `--chars`: number of characters\n- `--words`: number of whitespace-separated words\n")
    main_tip = r.commit("Add --words option", {"textstats.py": words, "README.md": readme_words})

    r.git("checkout", "-q", "feature/lines")
    lines = TEXTSTATS_BASE.replace(
        "def count_chars(text):\n    return len(text)\n",
        "def count_chars(text):\n    return len(text)\n\n\n"
        "def count_lines(text):\n    \"\"\"Number of lines; a last line without newline counts too.\"\"\"\n"
        "    if not text:\n        return 0\n"
        "    return text.count(\"\\n\") + (0 if text.endswith(\"\\n\") else 1)\n")
    lines = lines.replace(
        '    parser.add_argument("--chars", action="store_true", help="number of characters")\n',
        '    parser.add_argument("--chars", action="store_true", help="number of characters")\n'
        '    parser.add_argument("--lines", action="store_true", help="number of lines")\n')
    lines = lines.replace(
        "    show_all = not args.chars\n    if args.chars or show_all:\n"
        "        print(f\"chars: {count_chars(text)}\")\n",
        "    show_all = not (args.chars or args.lines)\n    if args.chars or show_all:\n"
        "        print(f\"chars: {count_chars(text)}\")\n    if args.lines or show_all:\n"
        "        print(f\"lines: {count_lines(text)}\")\n")
    readme_lines = README_BASE.replace("[--chars]", "[--chars] [--lines]").replace(
        "- `--chars`: number of characters\n",
        "- `--chars`: number of characters\n- `--lines`: number of lines\n")
    feature_tip = r.commit("Add --lines option", {"textstats.py": lines, "README.md": readme_lines},
                           author=("Lin Es", "lines@example.com"))
    r.git("checkout", "-q", "main")
    r.export("git-merge-conflict", {"main_tip": main_tip, "feature_tip": feature_tip})
    shutil.rmtree(tmp)


# --------------------------------------------------------------------------
# git-bisect-regression
# --------------------------------------------------------------------------
SLUG_HEADER = '''"""Helpers to turn titles into URL slugs."""
import re
import unicodedata

'''

SLUGIFY_GOOD = '''
def slugify(text, sep="-"):
    """Lower-case ASCII slug: runs of other characters become one separator."""
    text = unicodedata.normalize("NFKD", text)
    text = text.encode("ascii", "ignore").decode("ascii").lower()
    text = re.sub(r"[^a-z0-9]+", sep, text)
    return text.strip(sep)
'''

CHECK_PY = '''#!/usr/bin/env python3
"""Regression checks for slug.py: exits 0 when every check passes."""
import sys

from slug import slugify

CASES = [
    ("Hello World", "hello-world"),
    ("  Hello,   World!  ", "hello-world"),
    ("Crème brûlée", "creme-brulee"),
    ("C'est la vie -- 2nd ed.", "c-est-la-vie-2nd-ed"),
    ("already-a-slug", "already-a-slug"),
    ("", ""),
]


def main():
    failed = 0
    for text, want in CASES:
        got = slugify(text)
        if got != want:
            print(f"FAIL slugify({text!r}) = {got!r}, want {want!r}")
            failed += 1
    print("ok" if not failed else f"{failed} check(s) failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
'''


def make_bisect():
    tmp = tempfile.mkdtemp()
    r = Repo(os.path.join(tmp, "repo"))
    parts = {"header": SLUG_HEADER, "slugify": SLUGIFY_GOOD, "extra": []}

    def slug_text():
        return parts["header"] + parts["slugify"] + "".join(parts["extra"])

    commits = []

    def step(msg, extra=None, slugify=None, files=None, header=None):
        if extra:
            parts["extra"].append(extra)
        if slugify:
            parts["slugify"] = slugify
        if header:
            parts["header"] = header
        f = {"slug.py": slug_text()}
        f.update(files or {})
        commits.append((msg, r.commit(msg, f)))

    step("Initial slug helpers", files={"check.py": CHECK_PY,
                                        "README.md": "# slug\n\n`slugify(text)` turns titles into URL slugs.\n"})
    step("Add unslugify", extra='''
def unslugify(slug, sep="-"):
    """Best-effort inverse of slugify: words separated by spaces, capitalised."""
    return " ".join(w.capitalize() for w in slug.split(sep) if w)
''')
    step("Document the separator argument", files={"README.md": "# slug\n\n`slugify(text, sep=\"-\")` turns titles into URL slugs.\n"})
    step("Add is_slug", extra='''
def is_slug(text, sep="-"):
    """True if text is already a valid slug."""
    return bool(text) and slugify(text, sep) == text
''')
    step("Add CHANGELOG", files={"CHANGELOG.md": "# Changelog\n\n## 1.0\n\n- slugify, unslugify, is_slug\n"})
    v1 = commits[-1][1]
    r.git("tag", "v1.0")
    step("Add truncate helper", extra='''
def truncate_slug(slug, max_length, sep="-"):
    """Cut a slug to at most max_length characters without splitting words."""
    if len(slug) <= max_length:
        return slug
    cut = slug[:max_length + 1]
    if sep in cut:
        cut = cut[:cut.rindex(sep)]
    else:
        cut = cut[:max_length]
    return cut.strip(sep)
''')
    step("Speed up slugify with precompiled patterns", header=SLUG_HEADER + '_NON_ALNUM = re.compile(r"[^a-z0-9]+")\n\n',
         slugify=SLUGIFY_GOOD.replace('re.sub(r"[^a-z0-9]+", sep, text)', '_NON_ALNUM.sub(sep, text)'))
    step("Add unique_slug", extra='''
def unique_slug(text, taken, sep="-"):
    """slugify(text), with -2, -3, ... appended until it is not in taken."""
    base = slugify(text, sep)
    slug, n = base, 1
    while slug in taken:
        n += 1
        slug = f"{base}{sep}{n}"
    return slug
''')
    step("Update CHANGELOG", files={"CHANGELOG.md": "# Changelog\n\n## unreleased\n\n- truncate_slug, unique_slug\n\n## 1.0\n\n- slugify, unslugify, is_slug\n"})
    step("Tidy slugify docstring",
         slugify=SLUGIFY_GOOD.replace('re.sub(r"[^a-z0-9]+", sep, text)', '_NON_ALNUM.sub(sep, text)').replace(
             "Lower-case ASCII slug: runs of other characters become one separator.",
             "Return a lower-case ASCII slug of text.\n\n    Accents are stripped; runs of any other characters become one separator."))
    good_slugify = parts["slugify"]
    # The regression: the pattern loses its "+" so runs are no longer collapsed.
    step("Handle separators in a single pass",
         header=SLUG_HEADER + '_NON_ALNUM = re.compile(r"[^a-z0-9]")\n\n')
    bad = commits[-1][1]
    step("Add slug_path", extra='''
def slug_path(*titles, sep="-"):
    """Join the slugs of several titles with '/'."""
    return "/".join(slugify(t, sep) for t in titles)
''')
    step("Mention helpers in README", files={"README.md": "# slug\n\n`slugify(text, sep=\"-\")` turns titles into URL slugs.\n\nAlso: `unslugify`, `is_slug`, `truncate_slug`, `unique_slug`, `slug_path`.\n"})
    parts["extra"] = [e.replace('    if len(slug) <= max_length:', '    if max_length <= 0:\n        return ""\n    if len(slug) <= max_length:') for e in parts["extra"]]
    step("Make truncate_slug accept zero")
    step("Add command-line interface", extra='''

if __name__ == "__main__":
    import sys
    for line in sys.stdin:
        print(slugify(line.strip()))
''')
    step("Update CHANGELOG for 1.1", files={"CHANGELOG.md": "# Changelog\n\n## 1.1 (unreleased)\n\n- truncate_slug, unique_slug, slug_path\n- command-line interface\n\n## 1.0\n\n- slugify, unslugify, is_slug\n"})
    step("Spell-check docstrings", slugify=good_slugify.replace("Accents are stripped", "Accents are removed"))
    tip = commits[-1][1]
    r.export("git-bisect-regression", {"v1.0": v1, "first_bad": bad, "main_before": tip,
                                        "commits": [h for _, h in commits]})
    shutil.rmtree(tmp)


GENERATORS = {
    "git-recover-lost-commit": make_recover,
    "git-merge-conflict": make_merge,
    "git-bisect-regression": make_bisect,
}

if __name__ == "__main__":
    wanted = sys.argv[1:] or sorted(GENERATORS)
    for name in wanted:
        GENERATORS[name]()
        print("generated", name)
