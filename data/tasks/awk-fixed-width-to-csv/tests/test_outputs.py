import os
import random
import subprocess

import pytest

# bounds a hung program (a clear failure), never a speed test: a slow machine passes too
TIMEOUT = 300

SCRIPT = "/workspace/fw2csv.sh"
NAMES = ["ACME CORP", "Smith, John", 'Bob "The Builder"', "Zoë Müller", "O'Brien & Sons", "X",
         "Northwind Traders Intl Ltd", "Ünïcødé ✓ Trading", "  Leading Spaces", "Exactly twenty-nine chars abc"]


def amount_field(cents):
    s = "{:,}".format(abs(cents) // 100) + ".%02d" % (abs(cents) % 100)
    return (s + ("-" if cents < 0 else " ")).rjust(14)


def make_report(seed, n):
    rng = random.Random(seed)
    lines, rows = [], []
    for i in range(n):
        if i % 7 == 0:
            page = i // 7 + 1
            lines += [("\f" if page > 1 else "") + f"LEDGER REPORT   PAGE {page}",
                      "ACCOUNT   NAME                          BALANCE        DATE",
                      "--------- ----------------------------- -------------- ----------"]
        acct = "%09d" % rng.choice([0, 7, rng.randint(1, 999999999)])
        name = rng.choice(NAMES)[:29]
        cents = rng.choice([0, 5, -5, 100, -100000, rng.randint(-10 ** 9, 10 ** 10 - 1)])
        if rng.random() < 0.15:
            date, iso = " " * 10, ""
        else:
            d, m, y = rng.randint(1, 28), rng.randint(1, 12), rng.randint(1990, 2030)
            date, iso = f"{d:02d}/{m:02d}/{y:04d}", f"{y:04d}-{m:02d}-{d:02d}"
        line = f"{acct} {name.ljust(29)} {amount_field(cents)} {date}"
        if rng.random() < 0.05:
            line = "\f" + line
        lines.append(line)
        nm = name.strip()
        if "," in nm or '"' in nm:
            nm = '"' + nm.replace('"', '""') + '"'
        sign = "-" if cents < 0 else ""
        rows.append(f"{acct},{nm},{sign}{abs(cents) // 100}.{abs(cents) % 100:02d},{iso}")
        if i % 7 == 6:
            lines += ["", f"                         *** END OF PAGE {i // 7 + 1} ***"]
    # Decoys that must be ignored.
    lines += ["12345678 short account number", "1234567890 ten digits then space", "TOTAL      123,456.00",
              "", "  123456789 indented"]
    return "\n".join(lines) + "\n", "account,name,balance,date\n" + "".join(r + "\n" for r in rows)


def run(path):
    assert os.access(SCRIPT, os.X_OK), "fw2csv.sh must be executable"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/tmp"}  # no locale set
    r = subprocess.run([SCRIPT, str(path)], capture_output=True, timeout=TIMEOUT, env=env)
    assert r.returncode == 0, r.stderr
    return r.stdout.decode("utf-8")


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_hidden_reports(tmp_path, seed):
    text, want = make_report(seed, 60)
    p = tmp_path / "ledger.txt"
    p.write_bytes(text.encode("utf-8"))
    assert run(p) == want


def test_sample_report():
    out = run("/workspace/ledger.txt").splitlines()
    assert out[0] == "account,name,balance,date"
    assert len(out) == 19
    assert "136042266,\"Smith, John\",-30942.60,2020-01-28" in out
    assert "668835602,\"Bob \"\"The Builder\"\"\",7914877.18,2025-12-12" in out


def test_only_headers(tmp_path):
    p = tmp_path / "empty.txt"
    p.write_text("LEDGER\n---------\n\n")
    assert run(p) == "account,name,balance,date\n"
