import os
import subprocess

import pytest

# bounds a hung program (a clear failure), never a speed test: a slow machine passes too
TIMEOUT = 300

SCRIPT = "/workspace/redact.sh"

# Hidden corpus and its expected redaction (checked by hand against the rules).
CASES_IN = b'plain line without anything 123 4567\nuser=alice@example.com logged in\ncontact: bob.smith+ops@mail.example.co.uk, carol_99@sub-domain.example.org.\nnot an email: foo@bar, foo@bar.c, @example.com\ntoken=abc123&page=2\n?TOKEN=abc;next=1\nPassword:  s3cr3t, x\npassword =notmatched and passwordx=nope my_token=keep access-token=drop\napi_key:"quoted" secret=\nsecret=val"ue passwd=p@ss.word.example.com\ncard 4111 1111 1111 1111 ok\ncard 4111-1111-1111-1234 ok\ncard 4111111111119876 ok\ncard 4111-1111 1111-1234 mixed separators\ncard 41111111111198765 seventeen digits\ncard 4111  1111  1111  1111 double spaces\nip 10.0.0.1:8080 and 192.168.1.255\nhost 10.0.0.1. end\nversion 1.2.3.4.5 and 10.0.0.300 and 10.01.1.1 and 256.1.1.1\nip 0.0.0.0 and 255.255.255.255 and 1.2.3.4a\nv1.2.3.4 x1.2.3.4 .1.2.3.4 1.2.3.4.\nuser@10.0.0.1 uses ip\n\xc3\xbcn\xc3\xafc\xc3\xb6d\xc3\xa9 10.9.8.7 \xe2\x9c\x93 ann@ex\xc3\xa4mple.com ann@example.com\ntab\tseparated\ttoken=t\tx\nlast line without newline 10.0.0.2'.splitlines(keepends=True)
CASES_OUT = b'plain line without anything 123 4567\nuser=[EMAIL] logged in\ncontact: [EMAIL], [EMAIL].\nnot an email: foo@bar, foo@bar.c, @example.com\ntoken=[REDACTED]&page=2\n?TOKEN=[REDACTED];next=1\nPassword:  [REDACTED], x\npassword =notmatched and passwordx=nope my_token=keep access-token=[REDACTED]\napi_key:"quoted" secret=\nsecret=[REDACTED]"ue passwd=[REDACTED]\ncard ****-****-****-1111 ok\ncard ****-****-****-1234 ok\ncard ****-****-****-9876 ok\ncard 4111-1111 1111-1234 mixed separators\ncard 41111111111198765 seventeen digits\ncard 4111  1111  1111  1111 double spaces\nip [IPV4]:8080 and [IPV4]\nhost [IPV4]. end\nversion 1.2.3.4.5 and 10.0.0.300 and 10.01.1.1 and 256.1.1.1\nip [IPV4] and [IPV4] and [IPV4]a\nv[IPV4] x[IPV4] .1.2.3.4 [IPV4].\nuser@[IPV4] uses ip\n\xc3\xbcn\xc3\xafc\xc3\xb6d\xc3\xa9 [IPV4] \xe2\x9c\x93 ann@ex\xc3\xa4mple.com [EMAIL]\ntab\tseparated\ttoken=[REDACTED]\tx\nlast line without newline [IPV4]'.splitlines(keepends=True)
SAMPLE_OUT = b'2025-03-01T10:00:01Z INFO login ok user=[EMAIL] from [IPV4]\n2025-03-01T10:00:02Z WARN retry url=https://api.example.com/v1?token=[REDACTED]&page=2\n2025-03-01T10:00:03Z INFO payment card=****-****-****-1111 amount=12.50\n2025-03-01T10:00:04Z DEBUG config password: [REDACTED], timeout=30\n2025-03-01T10:00:05Z INFO version 1.2.3.4.5 released, build 10.0.0.300\n2025-03-01T10:00:06Z INFO forward to [IPV4]:8080 for [EMAIL]\n'


def redact(data: bytes) -> bytes:
    assert os.access(SCRIPT, os.X_OK), "redact.sh must be executable"
    r = subprocess.run([SCRIPT], input=data, capture_output=True, timeout=TIMEOUT)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.parametrize("i", range(len(CASES_IN)))
def test_line(i):
    assert redact(CASES_IN[i]) == CASES_OUT[i]


def test_whole_corpus_at_once():
    assert redact(b"".join(CASES_IN)) == b"".join(CASES_OUT)


def test_sample_log():
    with open("/workspace/app.log", "rb") as f:
        assert redact(f.read()) == SAMPLE_OUT


def test_empty_input_and_untouched_text():
    assert redact(b"") == b""
    text = b"nothing to hide here: 12 345 6789, a.b.c, x@y, {{}} \\ $HOME\n" * 50
    assert redact(text) == text
