#!/bin/bash
set -euo pipefail
cat > /workspace/render.sh <<'SH'
#!/bin/bash
# Render a template: {{NAME}} / {{NAME:-default}} from the environment, \{{ -> {{.
if [ $# -gt 1 ]; then
    echo "usage: render.sh [TEMPLATE_FILE]" >&2
    exit 2
fi
if [ $# -eq 1 ] && { [ ! -f "$1" ] || [ ! -r "$1" ]; }; then
    echo "render: cannot read template: $1" >&2
    exit 2
fi
exec python3 -c '
import os, re, sys
path = sys.argv[1] if len(sys.argv) > 1 else None
data = open(path, "rb").read() if path else sys.stdin.buffer.read()
pat = re.compile(rb"\\\{\{|\{\{([A-Za-z_][A-Za-z0-9_]*)(?::-((?:(?!\}\}).)*?))?\}\}", re.S)
env = os.environb
missing = []
def sub(m):
    if m.group(0) == b"\\{{":
        return b"{{"
    name, default = m.group(1), m.group(2)
    val = env.get(name)
    if default is not None:
        return val if val else default
    if val is None:
        if name not in missing:
            missing.append(name)
        return b""
    return val
out = pat.sub(sub, data)
if missing:
    for n in missing:
        sys.stderr.write("render: missing variable %s\n" % n.decode())
    sys.exit(3)
sys.stdout.buffer.write(out)
' "$@"
SH
chmod +x /workspace/render.sh
