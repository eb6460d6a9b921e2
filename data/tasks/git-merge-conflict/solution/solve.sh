#!/bin/bash
set -euo pipefail
cd /workspace/repo
git checkout -q main
if git merge-base --is-ancestor feature/lines HEAD; then
    echo "feature/lines already merged"
    exit 0
fi
git merge --no-ff --no-edit feature/lines || true   # conflicts expected
cat > textstats.py <<'PY'
#!/usr/bin/env python3
"""Print simple statistics about a text file."""
import argparse
import sys


def count_chars(text):
    return len(text)


def count_words(text):
    """Whitespace-separated words."""
    return len(text.split())


def count_lines(text):
    """Number of lines; a last line without newline counts too."""
    if not text:
        return 0
    return text.count("\n") + (0 if text.endswith("\n") else 1)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("path")
    parser.add_argument("--chars", action="store_true", help="number of characters")
    parser.add_argument("--words", action="store_true", help="number of words")
    parser.add_argument("--lines", action="store_true", help="number of lines")
    args = parser.parse_args(argv)

    with open(args.path, encoding="utf-8") as f:
        text = f.read()

    show_all = not (args.chars or args.words or args.lines)
    if args.chars or show_all:
        print(f"chars: {count_chars(text)}")
    if args.words or show_all:
        print(f"words: {count_words(text)}")
    if args.lines or show_all:
        print(f"lines: {count_lines(text)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
PY
cat > README.md <<'MD'
# textstats

Usage: `python3 textstats.py PATH [--chars] [--words] [--lines]`

Options:

- `--chars`: number of characters
- `--words`: number of whitespace-separated words
- `--lines`: number of lines

Without options every statistic is printed.
MD
git add textstats.py README.md
git commit -q --no-edit
git log --oneline --graph -5
