#!/usr/bin/env python3
"""Generate data/swesmith/instances.jsonl from the clean repos and the bug definitions below.

For every bug: copy repos/<repo> to a scratch dir, apply the textual mutation, produce
the bug-introducing patch with `diff -u` (paths a/... b/... relative to the repo root),
then run the repo's pytest suite on the clean and the buggy copy:
    FAIL_TO_PASS = tests passing on the clean repo and failing on the buggy one
    PASS_TO_PASS = tests passing on both
Everything is sorted, so the output is deterministic. Python 3 stdlib + pytest + diff.

Usage: python3 data/swesmith/make_instances.py [--check]
    --check  regenerate in memory and exit 1 if instances.jsonl differs.
Set PYTHON to choose the interpreter that runs pytest (default: this one if it has
pytest, else /usr/bin/python3).
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPOS = os.path.join(HERE, "repos")
OUT = os.path.join(HERE, "instances.jsonl")
SAFE_NODEID = re.compile(r"^[A-Za-z0-9_./:\[\]+,-]+$")


def pytest_python():
    if os.environ.get("PYTHON"):
        return os.environ["PYTHON"]
    r = subprocess.run([sys.executable, "-c", "import pytest"], capture_output=True)
    return sys.executable if r.returncode == 0 else "/usr/bin/python3"


# Each bug: (short name, repo, file, old text, new text, problem statement).
BUGS = [
    ("median_even_floor", "tinystats", "tinystats/core.py",
     "    return (data[mid - 1] + data[mid]) / 2\n",
     "    return (data[mid - 1] + data[mid]) // 2\n",
     """median() gives wrong results for an even number of values

With an even number of data points `median()` should return the mean of the two middle values, but the fractional part is lost:

```python
>>> from tinystats import median
>>> median([1, 2])
1
>>> median([3, 1, 4, 1, 5, 9])
3
```

Expected `1.5` and `3.5`. Odd-length inputs are fine.
"""),
    ("variance_ddof_swapped", "tinystats", "tinystats/core.py",
     "    return ss / (len(data) - 1 if sample else len(data))\n",
     "    return ss / (len(data) if sample else len(data) - 1)\n",
     """variance()/stdev() use the wrong denominator

`variance([2, 4, 4, 4, 5, 5, 7, 9], sample=False)` should be the population variance `4.0`, but I get `4.571428...`, and the default (sample) variance returns `4.0` instead of `32/7`. With `sample=False` and a single value it even crashes:

```
>>> variance([5], sample=False)
ZeroDivisionError: float division by zero
```

`stdev`, `zscores` and `describe` are affected as well.
"""),
    ("percentile_no_interpolation", "tinystats", "tinystats/core.py",
     "    hi = min(lo + 1, len(data) - 1)\n",
     "    hi = min(lo, len(data) - 1)\n",
     """percentile() does not interpolate between ranks

The docstring says percentile() matches numpy's default linear method, but values between two data points are never interpolated:

```python
>>> percentile([4, 1, 3, 2], 25)
1       # numpy.percentile gives 1.75
>>> percentile([4, 1, 3, 2], 50)
2       # expected 2.5
```

0 and 100 still return min and max.
"""),
    ("iso_hours_minutes_order", "durparse", "durparse/parser.py",
     '    r"(?:T(?:(?P<h>\\d+(?:\\.\\d+)?)H)?(?:(?P<m>\\d+(?:\\.\\d+)?)M)?(?:(?P<s>\\d+(?:\\.\\d+)?)S)?)?"\n',
     '    r"(?:T(?:(?P<m>\\d+(?:\\.\\d+)?)M)?(?:(?P<h>\\d+(?:\\.\\d+)?)H)?(?:(?P<s>\\d+(?:\\.\\d+)?)S)?)?"\n',
     """ISO 8601 durations with hours and minutes are rejected

`parse_duration("PT1H30M")` raises

```
durparse.parser.DurationError: invalid ISO 8601 duration: 'PT1H30M'
```

although `PT1H` and `PT30M` on their own work. Because of this, `format_duration(x, style="iso")` output such as `P1DT1H1M1S` can no longer be parsed back.
"""),
    ("format_max_units_zero_parts", "durparse", "durparse/format.py",
     "    parts = [p for p in _split(abs(seconds)) if p[2]]\n"
     "    if max_units is not None:\n"
     "        parts = parts[:max_units]\n",
     "    parts = _split(abs(seconds))\n"
     "    if max_units is not None:\n"
     "        parts = parts[:max_units]\n"
     "    parts = [p for p in parts if p[2]]\n",
     """format_duration(max_units=...) drops everything for short durations

`max_units` is supposed to keep the largest non-zero units, but it seems to count units that are zero:

```python
>>> format_duration(3599, max_units=1)
'0s'                 # expected '59m'
>>> format_duration(3601, max_units=2)
'1h'                 # expected '1h 1s'
```

Without `max_units` everything is fine.
"""),
    ("format_fraction_truncated", "durparse", "durparse/format.py",
     "    seconds = int(round(seconds))\n",
     "    seconds = int(seconds)\n",
     """format_duration truncates fractional seconds instead of rounding

The docstring says fractions are rounded to whole seconds, but `format_duration(59.6)` returns `'59s'`; I expected `'1m'` (59.6 rounds to 60). Same in the long and ISO styles.
"""),
    ("quoted_value_inline_comment", "iniconf", "iniconf/parser.py",
     "        if ch == '\"':\n",
     "        if ch == \"'\":\n",
     """Inline comment markers inside double-quoted values truncate the value

The README says double quotes keep `;` and `#` literal, but

```ini
[a]
greeting = "hello ; world"
v = "x # y"  # comment
```

gives `cfg.get("a", "greeting") == '"hello'` and `cfg.get("a", "v") == '"x'` instead of `hello ; world` and `x # y`. The value is cut at the first ` ;` / ` #` even inside the quotes.
"""),
    ("interpolation_wrong_section", "iniconf", "iniconf/parser.py",
     "            return self._interpolate(sec, raw, depth + 1)\n",
     "            return self._interpolate(section, raw, depth + 1)\n",
     """Cross-section references fail when the referenced value itself uses ${...}

```ini
[server]
host = example.org
port = 8080
url = http://${host}:${port}/

[client]
server = ${server:url}
```

`cfg.get("server", "url")` works, but `cfg.get("client", "server")` raises `ParseError: bad reference ${host}`. It looks like the nested `${host}` is looked up in `[client]` instead of `[server]`. Plain cross-section references without nesting work.
"""),
]


def run_pytest(py, repo_dir):
    """Return {nodeid: outcome} for the whole suite of repo_dir."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    r = subprocess.run([py, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "tests"],
                       cwd=repo_dir, capture_output=True, text=True, env=env, timeout=300)
    status = {}
    for line in r.stdout.splitlines():
        m = re.match(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (\S+)", line)
        if m:
            status.setdefault(m.group(2), m.group(1))
    if not status:
        raise SystemExit(f"no test results in {repo_dir}:\n{r.stdout}\n{r.stderr}")
    return status


def make_patch(clean_dir, buggy_dir, rel):
    r = subprocess.run(["diff", "-u", "--label", f"a/{rel}", "--label", f"b/{rel}",
                        os.path.join(clean_dir, rel), os.path.join(buggy_dir, rel)],
                       capture_output=True, text=True)
    if r.returncode != 1:
        raise SystemExit(f"diff failed for {rel}: {r.stderr}")
    return r.stdout


def build():
    py = pytest_python()
    rows = []
    clean_cache = {}
    for short, repo, rel, old, new, statement in BUGS:
        src = os.path.join(REPOS, repo)
        with tempfile.TemporaryDirectory() as tmp:
            clean = os.path.join(tmp, "clean")
            buggy = os.path.join(tmp, "buggy")
            ignore = shutil.ignore_patterns("__pycache__", ".pytest_cache")
            shutil.copytree(src, clean, ignore=ignore)
            shutil.copytree(src, buggy, ignore=ignore)
            path = os.path.join(buggy, rel)
            text = open(path, encoding="utf-8").read()
            if text.count(old) != 1:
                raise SystemExit(f"{repo}__{short}: mutation anchor found {text.count(old)} times")
            with open(path, "w", encoding="utf-8") as f:
                f.write(text.replace(old, new))
            patch = make_patch(clean, buggy, rel)
            if repo not in clean_cache:
                clean_cache[repo] = run_pytest(py, clean)
            before = clean_cache[repo]
            after = run_pytest(py, buggy)
        bad_clean = [t for t, s in before.items() if s != "PASSED"]
        if bad_clean:
            raise SystemExit(f"{repo}: clean repo has failing tests: {bad_clean}")
        f2p = sorted(t for t in before if after.get(t) in ("FAILED", "ERROR"))
        p2p = sorted(t for t in before if after.get(t) == "PASSED")
        if not f2p:
            raise SystemExit(f"{repo}__{short}: the mutation breaks no test")
        for t in f2p + p2p:
            if not SAFE_NODEID.match(t):
                raise SystemExit(f"unsafe test id (spaces/quotes): {t!r}")
        rows.append({
            "instance_id": f"{repo}__{short}",
            "repo": repo,
            "base_commit": None,
            "patch": patch,
            "FAIL_TO_PASS": f2p,
            "PASS_TO_PASS": p2p,
            "image_name": f"cseng/swesmith.{repo}",
            "problem_statement": statement,
            "environment": {"source_dir": f"swesmith/repos/{repo}", "install": []},
        })
    return "".join(json.dumps(r) + "\n" for r in rows)


def main(argv):
    text = build()
    if "--check" in argv:
        current = open(OUT, encoding="utf-8").read() if os.path.exists(OUT) else ""
        if current != text:
            print("instances.jsonl is out of date; run make_instances.py", file=sys.stderr)
            return 1
        print("instances.jsonl is up to date")
        return 0
    with open(OUT, "w", encoding="utf-8") as f:
        f.write(text)
    for line in text.splitlines():
        r = json.loads(line)
        print(f"{r['instance_id']}: {len(r['FAIL_TO_PASS'])} F2P, {len(r['PASS_TO_PASS'])} P2P")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
