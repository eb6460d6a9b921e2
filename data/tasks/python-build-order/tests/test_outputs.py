import importlib.util
import random
import subprocess
import sys

import pytest

# bounds a hung program (a clear failure), never a speed test: a slow machine passes too
TIMEOUT = 300

TOOL = "/workspace/buildorder.py"


def load():
    spec = importlib.util.spec_from_file_location("buildorder_under_test", TOOL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def run(tmp_path, text, *args):
    p = tmp_path / "deps.txt"
    p.write_text(text)
    return subprocess.run([sys.executable, TOOL, str(p), *args], capture_output=True, text=True, timeout=TIMEOUT)


def reference(graph, nodes=None):
    nodes = set(graph) if nodes is None else nodes
    order, done = [], set()
    while True:
        ready = sorted(n for n in nodes - done if graph[n] <= done)
        if not ready:
            break
        order.append(ready[0])
        done.add(ready[0])
    return order, sorted(nodes - done)


def test_sample_file():
    r = subprocess.run([sys.executable, TOOL, "/workspace/deps.txt"], capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["docs", "libc", "libjson", "utils", "libnet", "app", "tests"]


def test_target_subset(tmp_path):
    text = "app: libnet libjson utils\nlibnet: libc utils\nlibjson: libc\nutils: libc\ndocs\ntests: app\n"
    r = run(tmp_path, text, "--target", "libnet")
    assert r.returncode == 0 and r.stdout.split() == ["libc", "utils", "libnet"]
    r = run(tmp_path, text, "--target", "nope")
    assert r.returncode == 2


def test_parse_details(tmp_path):
    mod = load()
    g = mod.parse("  # comment\n\n a :  b   c \na: d\n  e\nf:\n\tb: e\n")
    assert g == {"a": {"b", "c", "d"}, "b": {"e"}, "c": set(), "d": set(), "e": set(), "f": set()}
    assert mod.build_order(g) == ["c", "d", "e", "b", "a", "f"]
    assert mod.build_order(g, "b") == ["e", "b"]
    with pytest.raises(KeyError):
        mod.build_order(g, "zzz")


def test_string_order_not_natural(tmp_path):
    r = run(tmp_path, "t10\nt9\nT1\n_x\nt10: t2\n")
    assert r.returncode == 0
    assert r.stdout.split() == ["T1", "_x", "t2", "t10", "t9"]


@pytest.mark.parametrize("text,line", [("a: b: c\n", 1), ("ok: x\n: y\n", 2), ("a\nb\nc: d # comment\n", 3),
                                       ("a b: c\n", 1)])
def test_syntax_errors(tmp_path, text, line):
    r = run(tmp_path, text)
    assert r.returncode == 2
    assert r.stdout == ""
    assert f"line {line}" in r.stderr


def test_cycles(tmp_path):
    text = "a: b\nb: c\nc: a\nd: c\ne\nf: e\ng: g\n"
    r = run(tmp_path, text)
    assert r.returncode == 1
    assert r.stdout == ""
    assert r.stderr.strip() == "cycle: a b c d g"
    r = run(tmp_path, text, "--target", "f")
    assert r.returncode == 0 and r.stdout.split() == ["e", "f"]
    r = run(tmp_path, text, "--target", "d")
    assert r.returncode == 1 and r.stderr.strip() == "cycle: a b c d"
    mod = load()
    with pytest.raises(ValueError):
        mod.build_order(mod.parse(text))


@pytest.mark.parametrize("seed", range(6))
def test_random_graphs(tmp_path, seed):
    rng = random.Random(seed)
    names = [f"n{rng.randint(0, 999)}" for _ in range(120)]
    names = sorted(set(names))
    rank = {n: i for i, n in enumerate(rng.sample(names, len(names)))}
    lines, graph = [], {n: set() for n in names}
    for n in names:
        deps = [m for m in rng.sample(names, 4) if rank[m] < rank[n]]
        if seed >= 4 and rng.random() < 0.02:
            deps.append(rng.choice(names))  # may create cycles
        graph[n] |= set(deps)
        lines.append(f"{n}: {' '.join(deps)}" if deps else n)
    rng.shuffle(lines)
    order, stuck = reference(graph)
    r = run(tmp_path, "\n".join(lines) + "\n")
    if stuck:
        assert r.returncode == 1 and r.stderr.strip() == "cycle: " + " ".join(stuck)
    else:
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == order
    mod = load()
    assert mod.parse("\n".join(lines)) == graph
