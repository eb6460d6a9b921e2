#!/usr/bin/env python3
"""Print simple statistics about a text file."""
import argparse
import sys


def count_chars(text):
    return len(text)


def count_words(text):
    """Whitespace-separated words."""
    return len(text.split())


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("path")
    parser.add_argument("--chars", action="store_true", help="number of characters")
    parser.add_argument("--words", action="store_true", help="number of words")
    args = parser.parse_args(argv)

    with open(args.path, encoding="utf-8") as f:
        text = f.read()

    show_all = not (args.chars or args.words)
    if args.chars or show_all:
        print(f"chars: {count_chars(text)}")
    if args.words or show_all:
        print(f"words: {count_words(text)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
