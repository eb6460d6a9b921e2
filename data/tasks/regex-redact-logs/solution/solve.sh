#!/bin/bash
set -euo pipefail
cat > /workspace/redact.sh <<'SH'
#!/bin/bash
# Redact secrets, e-mail addresses, card numbers and IPv4 addresses (stdin -> stdout).
exec python3 -c '
import re, sys
SECRET = re.compile(r"(?<![A-Za-z0-9_])((?:password|passwd|token|api_key|secret)[=:] *)[^\s&;,\"]+", re.I)
EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")
CARD = re.compile(r"(?<![0-9])([0-9]{4})([ -]?)([0-9]{4})\2([0-9]{4})\2([0-9]{4})(?![0-9])")
OCT = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])"
IPV4 = re.compile(r"(?<![0-9.])" + OCT + r"(?:\." + OCT + r"){3}(?![0-9])(?!\.[0-9])")
data = sys.stdin.buffer.read().decode("utf-8", "surrogateescape")
out = []
for line in data.splitlines(keepends=True):
    line = SECRET.sub(lambda m: m.group(1) + "[REDACTED]", line)
    line = EMAIL.sub("[EMAIL]", line)
    line = CARD.sub(lambda m: "****-****-****-" + m.group(5), line)
    line = IPV4.sub("[IPV4]", line)
    out.append(line)
sys.stdout.buffer.write("".join(out).encode("utf-8", "surrogateescape"))
'
SH
chmod +x /workspace/redact.sh
