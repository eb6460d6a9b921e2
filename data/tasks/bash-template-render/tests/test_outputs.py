import os
import subprocess

import pytest

# bounds a hung program (a clear failure), never a speed test: a slow machine passes too
TIMEOUT = 300

SCRIPT = "/workspace/render.sh"
BASE_ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/tmp", "LANG": "C.UTF-8"}


def render(template: bytes, env=None, via_stdin=False, tmp_path=None):
    e = dict(BASE_ENV)
    e.update(env or {})
    if via_stdin:
        return subprocess.run(["bash", SCRIPT], input=template, capture_output=True, timeout=TIMEOUT, env=e)
    p = tmp_path / "t.tpl"
    p.write_bytes(template)
    return subprocess.run(["bash", SCRIPT, str(p)], capture_output=True, timeout=TIMEOUT, env=e)


CASES = [
    # (template, env, expected)
    (b"Hello {{NAME}}!\n", {"NAME": "World"}, b"Hello World!\n"),
    (b"url={{URL}}", {"URL": "https://a.example/x?y=1&z=2"}, b"url=https://a.example/x?y=1&z=2"),
    (b"p={{P}}\n", {"P": r"a\b\\c & /d/ $HOME `id`"}, b"p=" + rb"a\b\\c & /d/ $HOME `id`" + b"\n"),
    (b"{{A}}{{B}}{{A}}\n", {"A": "1", "B": "{{A}}"}, b"1{{A}}1\n"),
    (b"multi: {{M}}.\n", {"M": "line1\nline2\n"}, b"multi: line1\nline2\n.\n"),
    (b"port={{PORT:-8080}} host={{HOST:-}}!\n", {}, b"port=8080 host=!\n"),
    (b"port={{PORT:-8080}}\n", {"PORT": ""}, b"port=8080\n"),
    (b"port={{PORT:-8080}}\n", {"PORT": "9"}, b"port=9\n"),
    (b"greet={{G:-Hello & welcome, a/b}}\n", {}, b"greet=Hello & welcome, a/b\n"),
    (b"empty={{E}}|\n", {"E": ""}, b"empty=|\n"),
    (b"lit \\{{NAME}} and {{ NAME }} and {NAME} and {{NAME\n", {"NAME": "x"},
     b"lit {{NAME}} and {{ NAME }} and {NAME} and {{NAME\n"),
    (b"{{1BAD}} {{a-b}} }} {{}} {{_ok9}}", {"_ok9": "Y"}, b"{{1BAD}} {{a-b}} }} {{}} Y"),
    (b"no newline at end {{X}}", {"X": "x"}, b"no newline at end x"),
    (b"  leading and trailing spaces  \n\n\n", {}, b"  leading and trailing spaces  \n\n\n"),
    (b"utf8: {{U}} \xc3\xa9\n", {"U": "\u00fc\u00df"}, "utf8: \u00fc\u00df \u00e9\n".encode()),
    (b"", {}, b""),
]


@pytest.mark.parametrize("i", range(len(CASES)))
def test_render_file(i, tmp_path):
    tpl, env, want = CASES[i]
    r = render(tpl, env, tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout == want


@pytest.mark.parametrize("i", [0, 2, 4, 10, 12])
def test_render_stdin(i):
    tpl, env, want = CASES[i]
    r = render(tpl, env, via_stdin=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout == want


def test_missing_variables(tmp_path):
    tpl = b"a={{A}} b={{B}} a2={{A}} c={{C:-x}} d={{D}} e={{E}}\n"
    r = render(tpl, {"E": ""}, tmp_path=tmp_path)
    assert r.returncode == 3
    assert r.stdout == b""
    assert r.stderr.decode().splitlines() == [
        "render: missing variable A",
        "render: missing variable B",
        "render: missing variable D",
    ]


def test_missing_file(tmp_path):
    r = subprocess.run(["bash", SCRIPT, str(tmp_path / "nope.tpl")], capture_output=True,
                       timeout=TIMEOUT, env=BASE_ENV)
    assert r.returncode == 2
    assert r.stdout == b"" and r.stderr != b""


def test_example_template(tmp_path):
    env = {"APP_NAME": "shop", "DB_USER": "app", "DB_PASSWORD": "p@ss/w&rd\\1", "DB_NAME": "main"}
    r = subprocess.run(["bash", SCRIPT, "/workspace/templates/app.env.tpl"], capture_output=True,
                       timeout=TIMEOUT, env={**BASE_ENV, **env})
    assert r.returncode == 0, r.stderr
    assert r.stdout == (b"APP_NAME=shop\n"
                        b"DATABASE_URL=postgres://app:p@ss/w&rd\\1@localhost:5432/main\n"
                        b"GREETING=Hello & welcome\n"
                        b"# literal braces for the app's own templating: {{user}}\n")
