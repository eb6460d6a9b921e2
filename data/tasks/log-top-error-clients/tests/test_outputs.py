import os
import random
import re
import subprocess

import pytest

# bounds a hung program (a clear failure), never a speed test: a slow machine passes too
TIMEOUT = 300

SCRIPT = "/workspace/top_errors.sh"
LINE = re.compile(r'^(\d+\.\d+\.\d+\.\d+) [^"]*\[[^\]]*\] "(?:[^"\\]|\\.)*" (\d+) ')


def expected(lines, n=5):
    cnt = {}
    for l in lines:
        m = LINE.match(l)
        if m and 500 <= int(m.group(2)) <= 599:
            cnt[m.group(1)] = cnt.get(m.group(1), 0) + 1
    rows = sorted(cnt.items(), key=lambda kv: (-kv[1], tuple(int(x) for x in kv[0].split("."))))
    if n:
        rows = rows[:n]
    return "".join(f"{c} {ip}\n" for ip, c in rows)


def run(tmp_path, lines, *args):
    p = tmp_path / "access.log"
    p.write_text("".join(l + "\n" for l in lines))
    assert os.access(SCRIPT, os.X_OK), "top_errors.sh must be executable"
    r = subprocess.run([SCRIPT, str(p), *args], capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    return r.stdout


def entry(ip, status, req="GET / HTTP/1.1", agent="curl/8", size=123):
    return f'{ip} - - [01/Jan/2025:00:00:00 +0000] "{req}" {status} {size} "-" "{agent}"'


def test_tricky_fields(tmp_path):
    lines = [
        entry("10.0.0.9", 200, agent="bot 500 503 x"),
        entry("10.0.0.9", 503),
        entry("10.0.0.10", 500),
        entry("10.0.0.10", 404, req="GET /a 500 b HTTP/1.1"),
        entry("10.0.0.2", 502, req="GET /search?q=a b c HTTP/1.1"),
        entry("10.0.0.2", 599),
        entry("10.0.0.3", 600),
        entry("10.0.0.3", 499),
        entry("9.255.0.1", 500),
        entry("100.1.1.1", 500),
        'garbage 500 line',
        '"10.0.0.4" - - [x] "GET / HTTP/1.1" 500 1 "-" "-"',
        entry("10.0.0.5", "5xx"),
        '',
    ]
    out = run(tmp_path, lines, "0")
    assert out == "2 10.0.0.2\n1 9.255.0.1\n1 10.0.0.9\n1 10.0.0.10\n1 100.1.1.1\n"
    assert out == expected(lines, 0)


@pytest.mark.parametrize("seed", [5, 6, 7])
def test_random_logs(tmp_path, seed):
    rng = random.Random(seed)
    ips = [f"{rng.choice([10, 172, 192, 8])}.{rng.randint(0, 255)}.{rng.randint(0, 3)}.{rng.randint(0, 20)}"
           for _ in range(60)]
    reqs = ["GET / HTTP/1.1", "POST /api/v1/x HTTP/1.1", "GET /q?a=1 2 3 HTTP/1.0", "GET /500 HTTP/1.1"]
    agents = ["Mozilla/5.0 (X11)", "bot 500", "-", "x 502 y"]
    lines = []
    for _ in range(3000):
        st = rng.choice([200, 200, 200, 301, 404, 500, 501, 502, 503, 504, 599, 418])
        lines.append(entry(rng.choice(ips), st, rng.choice(reqs), rng.choice(agents), rng.randint(0, 9999)))
        if rng.random() < 0.02:
            lines.append("junk " + str(rng.randint(500, 599)))
    assert run(tmp_path, lines) == expected(lines, 5)
    assert run(tmp_path, lines, "3") == expected(lines, 3)
    assert run(tmp_path, lines, "0") == expected(lines, 0)


def test_no_errors(tmp_path):
    lines = [entry("1.2.3.4", 200), entry("1.2.3.5", 404)]
    assert run(tmp_path, lines) == ""


def test_sample_log():
    with open("/workspace/logs/access.log") as f:
        lines = f.read().splitlines()
    r = subprocess.run([SCRIPT, "/workspace/logs/access.log"], capture_output=True, text=True, timeout=TIMEOUT)
    assert r.returncode == 0
    assert r.stdout == expected(lines, 5)
