"""An independent referee for cseng's computesdk files (spec/results/computesdk_spec.lua).

Written apart from cseng's Lua, from computesdk's own description of their method
(spec/fixtures/computesdk/README.md): their statistics and composite score, and their published
JSON Schema checked with Debian's python3-jsonschema (draft 7). Commands, each printing JSON:

  validate SCHEMA FILE   {"errors": [...]}: every schema violation (path and message)
  score FILE             per result of a computesdk file: median, p95, p99, successRate and
                         compositeScore recomputed from its iterations, their way
  fromlog LOG            the same per provider and cseng mode, from a cseng startup run log's
                         samples: measured (no warmups, no interrupted samples), a sample whose
                         audit failed counted as a failure, times rounded as their writer rounds
"""
import datetime
import json
import math
import sys

WEIGHTS = (0.60, 0.25, 0.15)  # median, p95, p99
CEILING_MS = 10_000
TRIM = 0.05


def js_round2(x):
    # JavaScript's Math.round(x * 100) / 100: half-way cases go up
    return math.floor(x * 100 + 0.5) / 100


def percentile(sorted_values, p):
    if not sorted_values:
        return 0
    idx = max(0, math.ceil((p / 100) * len(sorted_values)) - 1)
    return sorted_values[min(idx, len(sorted_values) - 1)]


def compute_stats(values):
    if not values:
        return {"median": 0, "p95": 0, "p99": 0}
    s = sorted(values)
    k = math.floor(len(s) * TRIM)
    t = s[k:len(s) - k] if k > 0 and len(s) - 2 * k > 0 else s
    mid = len(t) // 2
    median = (t[mid - 1] + t[mid]) / 2 if len(t) % 2 == 0 else t[mid]
    return {"median": median, "p95": percentile(t, 95), "p99": percentile(t, 99)}


def metric_score(v):
    return max(0, 100 * (1 - v / CEILING_MS))


def figures(times, attempts):
    st = compute_stats(times)
    rate = len(times) / attempts if attempts else 0
    if rate == 0:
        score = 0
    else:
        timing = (WEIGHTS[0] * metric_score(st["median"]) + WEIGHTS[1] * metric_score(st["p95"])
                  + WEIGHTS[2] * metric_score(st["p99"]))
        # scoring.ts: Math.round(timingScore * successRate * 100) / 100 (their writer rounds it again)
        score = math.floor(timing * rate * 100 + 0.5) / 100
    return {
        "median": js_round2(st["median"]), "p95": js_round2(st["p95"]), "p99": js_round2(st["p99"]),
        "successRate": js_round2(rate), "compositeScore": js_round2(score), "n": len(times), "attempts": attempts,
    }


def validate(schema_path, path):
    import jsonschema

    checker = jsonschema.FormatChecker()

    @checker.checks("date-time", raises=ValueError)
    def date_time(value):
        if not isinstance(value, str):
            return True
        # RFC 3339: a full date, 'T', a time, and an offset or Z
        if "T" not in value or not (value.endswith("Z") or value[-6] in "+-"):
            raise ValueError("not an RFC 3339 date-time")
        datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
        return True

    with open(schema_path) as f:
        schema = json.load(f)
    with open(path) as f:
        doc = json.load(f)
    v = jsonschema.Draft7Validator(schema, format_checker=checker)
    errors = [{"path": "/".join(str(p) for p in e.absolute_path), "message": e.message} for e in v.iter_errors(doc)]
    print(json.dumps({"errors": errors}))


def score(path):
    with open(path) as f:
        doc = json.load(f)
    out = []
    for r in doc["results"]:
        its = r.get("iterations", [])
        times = [i["ttiMs"] for i in its if not i.get("error")]
        f = figures(times, len(its))
        f["provider"], f["mode"] = r["provider"], r.get("mode")
        out.append(f)
    print(json.dumps(out))


def fromlog(path):
    groups = {}
    mode_of_run = {}
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            e = json.loads(line)
            if e.get("event") == "run_started":
                mode_of_run[e.get("run_id")] = e.get("mode") or "lockstep"
            if e.get("event") != "startup_trial":
                continue
            if e.get("warmup") or e.get("phase") == "warmup" or e.get("interrupted"):
                continue
            key = (e["provider"], mode_of_run.get(e.get("run_id"), "lockstep"))
            g = groups.setdefault(key, {"times": [], "attempts": 0, "excluded": 0})
            g["attempts"] += 1
            audit = e.get("audit")
            if isinstance(audit, dict) and audit.get("ok") is False:
                g["excluded"] += 1
                continue
            if e.get("ok") is True:
                g["times"].append(js_round2(e["ready_ms"]))
    out = []
    for (provider, mode), g in sorted(groups.items()):
        f = figures(g["times"], g["attempts"])
        f["provider"], f["mode"], f["excluded"] = provider, mode, g["excluded"]
        out.append(f)
    print(json.dumps(out))


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "validate":
        validate(sys.argv[2], sys.argv[3])
    elif cmd == "score":
        score(sys.argv[2])
    elif cmd == "fromlog":
        fromlog(sys.argv[2])
    else:
        sys.exit("usage: computesdk_check.py validate SCHEMA FILE | score FILE | fromlog LOG")
