import pytest

from iniconf import ParseError, load, loads

SAMPLE = '''
; sample configuration
[server]
host = example.org
port = 8080
url = http://${host}:${port}/      ; interpolation within the section
motd = "Welcome; enjoy"            # quotes keep ; and # literal
debug = off

[client]
server = ${server:url}
retries: 3
timeout = 2.5
hosts =
    a.example.org
    b.example.org   ; trailing comment
tags = a, b,, c
'''


@pytest.fixture()
def cfg():
    return loads(SAMPLE)


def test_sections_and_options(cfg):
    assert cfg.sections() == ["server", "client"]
    assert cfg.options("server") == ["host", "port", "url", "motd", "debug"]
    assert cfg.has_option("client", "RETRIES")
    assert not cfg.has_option("nope", "x")


def test_plain_values(cfg):
    assert cfg.get("server", "host") == "example.org"
    assert cfg.get("client", "retries") == "3"


def test_option_names_case_insensitive():
    c = loads("[S]\nKey = v\n")
    assert c.get("S", "key") == "v" and c.get("S", "KEY") == "v"


def test_inline_comments(cfg):
    assert cfg.raw("server", "url") == "http://${host}:${port}/"


def test_inline_comment_needs_whitespace():
    c = loads("[a]\ncolor = #ff0000\nurl = http://x/#frag ; comment\nhash = a#b\n")
    assert c.get("a", "color") == ""
    assert c.get("a", "url") == "http://x/#frag"
    assert c.get("a", "hash") == "a#b"


def test_quoted_values_keep_comment_chars(cfg):
    assert cfg.get("server", "motd") == "Welcome; enjoy"
    c = loads('[a]\nv = "x # y"  # real comment\nw = "say \\"hi\\""\n')
    assert c.get("a", "v") == "x # y"
    assert c.get("a", "w") == 'say "hi"'


def test_interpolation_same_section(cfg):
    assert cfg.get("server", "url") == "http://example.org:8080/"


def test_interpolation_cross_section(cfg):
    assert cfg.get("client", "server") == "http://example.org:8080/"


def test_nested_cross_section_references():
    c = loads("[a]\nx = 1\ny = ${x}2\n[b]\nz = ${a:y}3\n[c]\nx = 9\nw = ${b:z}\n")
    assert c.get("c", "w") == "123"


def test_bad_reference():
    c = loads("[a]\nx = ${missing}\ny = ${nosec:x}\n")
    with pytest.raises(ParseError):
        c.get("a", "x")
    with pytest.raises(ParseError):
        c.get("a", "y")


def test_recursive_reference():
    c = loads("[a]\nx = ${y}\ny = ${x}\n")
    with pytest.raises(ParseError):
        c.get("a", "x")


def test_typed_getters(cfg):
    assert cfg.getint("server", "port") == 8080
    assert cfg.getfloat("client", "timeout") == 2.5
    assert cfg.getbool("server", "debug") is False
    assert cfg.getint("server", "missing", default=7) == 7
    with pytest.raises(ValueError):
        cfg.getbool("server", "host")


def test_getlist_multiline_and_commas(cfg):
    assert cfg.getlist("client", "hosts") == ["a.example.org", "b.example.org"]
    assert cfg.getlist("client", "tags") == ["a", "b", "c"]


def test_missing_keys(cfg):
    with pytest.raises(KeyError):
        cfg.get("server", "nope")
    with pytest.raises(KeyError):
        cfg.get("nope", "host")
    assert cfg.get("server", "nope", default=None) is None


@pytest.mark.parametrize("text,lineno", [
    ("x = 1\n", 1),
    ("[a]\nx = 1\nx = 2\n", 3),
    ("[a]\n[a]\n", 2),
    ("[a]\njust text\n", 2),
], ids=["outside-section", "duplicate-option", "duplicate-section", "garbage-line"])
def test_parse_errors(text, lineno):
    with pytest.raises(ParseError) as exc:
        loads(text)
    assert exc.value.lineno == lineno


def test_load_file(tmp_path):
    p = tmp_path / "c.ini"
    p.write_text("[s]\nk = v\n", encoding="utf-8")
    assert load(str(p)).get("s", "k") == "v"
