import json
import random
import subprocess
import sys

import pytest

# bounds a hung program (a clear failure), never a speed test: a slow machine passes too
TIMEOUT = 300

TOOL = "/workspace/jflat.py"


def run(cmd, text):
    return subprocess.run([sys.executable, TOOL, cmd], input=text, capture_output=True,
                          text=True, timeout=TIMEOUT)


def dumps(o):
    return json.dumps(o, ensure_ascii=False, separators=(",", ":")) + "\n"


def ordered(o):
    """Comparable form that also checks key order and int/float types."""
    if isinstance(o, dict):
        return ("obj", [(k, ordered(v)) for k, v in o.items()])
    if isinstance(o, list):
        return ("arr", [ordered(v) for v in o])
    return (type(o).__name__, o)


def flatten(doc):
    r = run("flatten", json.dumps(doc))
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_example_from_spec():
    out = flatten({"a": {"b": [10, {"c": None}]}})
    assert out == '{"a.b[0]":10,"a.b[1].c":null}\n'
    out = flatten([{"x": 1}, [], {}, "s"])
    assert out == '{"[0].x":1,"[1]":[],"[2]":{},"[3]":"s"}\n'


def test_escaping():
    doc = {"a.b": {"x[1]": 1, "back\\slash": True, "plain": {"": 0}}}
    out = flatten(doc)
    assert json.loads(out) == {"a\\.b.x\\[1\\]": 1, "a\\.b.back\\\\slash": True, "a\\.b.plain.": 0}
    back = run("unflatten", out)
    assert back.returncode == 0, back.stderr
    assert ordered(json.loads(back.stdout)) == ordered(doc)


def test_sample_config():
    with open("/workspace/config.json") as f:
        doc = json.load(f)
    out = flatten(doc)
    assert out == dumps({"service.name": "orders", "service.port": 8080, "service.tls.enabled": True,
                         "service.tls.cert": None, "replicas[0].zone": "a", "replicas[0].weight": 0.5,
                         "replicas[1].zone": "b", "replicas[1].weight": 0.5, "tags[0]": "prod",
                         "tags[1]": "eu", "limits": {}, "features": []})


def test_empty_top_level():
    assert flatten({}) == "{}\n"
    assert flatten([]) == "{}\n"


def rand_doc(rng, depth=0):
    kind = rng.random()
    if depth > 4 or kind < 0.35:
        return rng.choice([None, True, False, rng.randint(-10**6, 10**6), rng.random() * 100,
                           "str", "ünïcödé ☃", "", "a.b[c]", {}, []])
    if kind < 0.7:
        keys = ["k", "a.b", "x[0]", "é", "sp ace", "back\\", "1", "0"]
        return {rng.choice(keys) + str(i): rand_doc(rng, depth + 1) for i in range(rng.randint(0, 4))}
    return [rand_doc(rng, depth + 1) for _ in range(rng.randint(0, 4))]


# one document of many random parts per run (a program start costs more than the document)
@pytest.mark.parametrize("seed", range(2))
def test_roundtrip_random(seed):
    rng = random.Random(seed)
    parts = [rand_doc(rng) for _ in range(12)]
    doc = {"root%d" % i: p for i, p in enumerate(parts)} if seed % 2 else parts
    flat_text = flatten(doc)
    flat = json.loads(flat_text)
    assert all(not isinstance(v, (dict, list)) or v in ({}, []) for v in flat.values())
    assert flat_text == dumps(flat)
    back = run("unflatten", flat_text)
    assert back.returncode == 0, back.stderr
    assert ordered(json.loads(back.stdout)) == ordered(doc)
    assert back.stdout == dumps(doc)


@pytest.mark.parametrize("bad", ["3", '"x"', "null", "{bad json", ""])
def test_bad_input(bad):
    r = run("flatten", bad)
    assert r.returncode == 1 and r.stderr.strip()


def test_usage():
    for args in ([], ["explode"]):
        r = subprocess.run([sys.executable, TOOL, *args], input="{}", capture_output=True,
                           text=True, timeout=TIMEOUT)
        assert r.returncode == 2
