import csv
import io
import os
import random
import subprocess
from decimal import Decimal

import pytest

# bounds a hung program (a clear failure), never a speed test: a slow machine passes too
TIMEOUT = 300

SCRIPT = "/workspace/report.sh"
HEADER = "order_id,date,region,product,quantity,unit_price,status"


def quote(s):
    return '"' + s.replace('"', '""') + '"' if any(c in s for c in ',"\n') else s


def make_csv(rows):
    lines = [HEADER]
    for r in rows:
        lines.append(",".join(quote(str(x)) for x in r))
    return "\n".join(lines) + "\n"


def expected(rows):
    stats = {}
    for (_oid, _d, region, _p, qty, price, status) in rows:
        if status != "complete":
            continue
        reg = region.strip()
        reg = reg[:1].upper() + reg[1:].lower()
        s = stats.setdefault(reg, [0, 0, Decimal(0)])
        s[0] += 1
        s[1] += int(qty)
        s[2] += int(qty) * Decimal(price)
    out = ["region,orders,units,revenue"]
    for reg, (o, u, rev) in sorted(stats.items(), key=lambda kv: (-kv[1][2], kv[0])):
        out.append(f"{reg},{o},{u},{rev:.2f}")
    return out


def run(tmp_path, text):
    p = tmp_path / "in.csv"
    p.write_text(text, encoding="utf-8")
    assert os.access(SCRIPT, os.X_OK), "report.sh must be executable"
    r = subprocess.run([SCRIPT, str(p)], capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    return [l for l in r.stdout.splitlines()]


def normalise(lines):
    # Accept any valid CSV quoting of the same values.
    return [",".join(row) for row in csv.reader(io.StringIO("\n".join(lines) + "\n"))]


def random_rows(seed, n):
    rng = random.Random(seed)
    regions = ["Nord-Est", "SOUTH", "  west ", "Lagos", "east", "Ile de france", "mid west"]
    products = ['Plain', 'Comma, inside', 'Quote "x"', 'Both, "y"', 'Multi\nline']
    statuses = ["complete", "complete", "Complete", "cancelled", "complete ", "refunded"]
    rows = []
    for i in range(n):
        rows.append((i + 1, f"2025-0{rng.randint(1, 9)}-1{rng.randint(0, 9)}", rng.choice(regions),
                     rng.choice(products), rng.randint(0, 50),
                     f"{rng.randint(0, 999)}.{rng.randint(0, 99):02d}", rng.choice(statuses)))
    return rows


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_inputs(tmp_path, seed):
    rows = random_rows(seed, 400)
    got = run(tmp_path, make_csv(rows))
    assert normalise(got) == expected(rows)


def test_exact_decimal_sums(tmp_path):
    rows = [(1, "2025-01-01", "Alpha", "p", 3, "0.10", "complete"),
            (2, "2025-01-01", "alpha", "p", 1, "0.20", "complete"),
            (3, "2025-01-01", "Beta", "p", 7, "0.10", "complete"),
            (4, "2025-01-01", "Beta", "p", 1, "0.01", "complete"),
            (5, "2025-01-01", "Gamma", "p", 1, "0.71", "complete"),
            (6, "2025-01-01", "Delta", "p", 100000, "0.07", "complete")]
    got = normalise(run(tmp_path, make_csv(rows)))
    assert got == ["region,orders,units,revenue", "Delta,1,100000,7000.00",
                   "Beta,2,8,0.71", "Gamma,1,1,0.71", "Alpha,2,4,0.50"]


def test_header_only(tmp_path):
    assert normalise(run(tmp_path, HEADER + "\n")) == ["region,orders,units,revenue"]


def test_sample_file():
    r = subprocess.run([SCRIPT, "/workspace/sales.csv"], capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0
    with open("/workspace/sales.csv", newline="", encoding="utf-8") as f:
        rows = [tuple(r) for r in list(csv.reader(f))[1:]]
    assert normalise(r.stdout.splitlines()) == expected(rows)
