#!/bin/bash
set -euo pipefail
cat > /workspace/jflat.py <<'PY'
#!/usr/bin/env python3
"""Flatten a JSON document to {path: leaf} and back."""
import json
import re
import sys


def esc(key):
    return re.sub(r"([.\[\]\\])", r"\\\1", key)


def flatten(doc):
    out = {}

    def walk(node, path):
        if isinstance(node, dict) and node:
            for k, v in node.items():
                walk(v, esc(k) if path is None else path + "." + esc(k))
        elif isinstance(node, list) and node:
            for i, v in enumerate(node):
                walk(v, ("" if path is None else path) + "[%d]" % i)
        else:
            out[path] = node

    if not isinstance(doc, (dict, list)):
        raise ValueError("top level must be an object or an array")
    if doc:
        walk(doc, None)
    return out


def parse_path(path):
    """Split a path into a list of str (object key) / int (array index) parts."""
    parts, n = [], len(path)
    i = 0

    def read_key(i):
        buf = []
        while i < n and path[i] not in ".[":
            if path[i] == "\\":
                i += 1
                if i >= n:
                    raise ValueError("dangling escape in %r" % path)
            buf.append(path[i])
            i += 1
        parts.append("".join(buf))
        return i

    if not path.startswith("["):
        i = read_key(i)
    while i < n:
        if path[i] == "[":
            j = path.index("]", i)
            parts.append(int(path[i + 1:j]))
            i = j + 1
        elif path[i] == ".":
            i = read_key(i + 1)
        else:
            raise ValueError("bad path %r" % path)
    return parts


def unflatten(flat):
    if not isinstance(flat, dict):
        raise ValueError("flattened input must be an object")
    if not flat:
        return {}
    root = None
    for path, value in flat.items():
        parts = parse_path(path)
        if not parts:
            raise ValueError("empty path")
        if root is None:
            root = [] if isinstance(parts[0], int) else {}
        node = root
        for idx, part in enumerate(parts):
            last = idx == len(parts) - 1
            nxt = None if last else ([] if isinstance(parts[idx + 1], int) else {})
            if isinstance(part, int):
                if not isinstance(node, list):
                    raise ValueError("path %r mixes objects and arrays" % path)
                if part == len(node):
                    node.append(value if last else nxt)
                elif part > len(node):
                    raise ValueError("array indices out of order in %r" % path)
                elif last:
                    raise ValueError("duplicate path %r" % path)
            else:
                if not isinstance(node, dict):
                    raise ValueError("path %r mixes objects and arrays" % path)
                if part not in node:
                    node[part] = value if last else nxt
                elif last:
                    raise ValueError("duplicate path %r" % path)
            if not last:
                node = node[part]
    return root


def main(argv):
    if len(argv) != 2 or argv[1] not in ("flatten", "unflatten"):
        print("usage: jflat.py flatten|unflatten < input.json", file=sys.stderr)
        return 2
    try:
        doc = json.loads(sys.stdin.read())
        result = flatten(doc) if argv[1] == "flatten" else unflatten(doc)
    except (ValueError, TypeError, IndexError, AttributeError) as exc:
        print("jflat.py: %s" % exc, file=sys.stderr)
        return 1
    sys.stdout.write(json.dumps(result, ensure_ascii=False, separators=(",", ":")) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
PY
chmod +x /workspace/jflat.py
