#!/bin/bash
set -euo pipefail
cat > /workspace/buildorder.py <<'PY'
#!/usr/bin/env python3
"""Compute a build order from a dependency file.

usage: buildorder.py DEPFILE [--target NAME]
"""
import heapq
import sys


class CycleError(ValueError):
    def __init__(self, stuck):
        super().__init__("cycle: " + " ".join(stuck))
        self.stuck = stuck


def parse(text):
    """Return {target: set(dependencies)} for the dependency file text."""
    graph = {}
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if "#" in line:
            raise ValueError("line %d: '#' inside a rule" % lineno)
        if line.count(":") > 1:
            raise ValueError("line %d: more than one ':'" % lineno)
        if ":" in line:
            head, _, tail = line.partition(":")
            names = head.split()
            if len(names) != 1:
                raise ValueError("line %d: expected exactly one target before ':'" % lineno)
            deps = tail.split()
        else:
            names = line.split()
            if len(names) != 1:
                raise ValueError("line %d: expected one target" % lineno)
            deps = []
        target = names[0]
        graph.setdefault(target, set()).update(deps)
        for d in deps:
            graph.setdefault(d, set())
    return graph


def build_order(graph, target=None):
    """Return the list of targets in build order."""
    if target is not None:
        if target not in graph:
            raise KeyError(target)
        nodes, stack = set(), [target]
        while stack:
            n = stack.pop()
            if n not in nodes:
                nodes.add(n)
                stack.extend(graph[n])
    else:
        nodes = set(graph)
    pending = {n: len(graph[n]) for n in nodes}
    users = {n: [] for n in nodes}
    for n in nodes:
        for d in graph[n]:
            users[d].append(n)
    ready = [n for n, k in pending.items() if k == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        n = heapq.heappop(ready)
        order.append(n)
        for u in users[n]:
            pending[u] -= 1
            if pending[u] == 0:
                heapq.heappush(ready, u)
    if len(order) != len(nodes):
        raise CycleError(sorted(nodes - set(order)))
    return order


def main(argv):
    args = argv[1:]
    target = None
    if len(args) == 3 and args[1] == "--target":
        target = args[2]
        args = args[:1]
    if len(args) != 1:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    try:
        with open(args[0], encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        print("buildorder: %s" % exc, file=sys.stderr)
        return 2
    try:
        graph = parse(text)
    except ValueError as exc:
        print("buildorder: %s" % exc, file=sys.stderr)
        return 2
    try:
        order = build_order(graph, target)
    except KeyError:
        print("buildorder: unknown target %s" % target, file=sys.stderr)
        return 2
    except CycleError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    sys.stdout.write("".join(n + "\n" for n in order))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
PY
