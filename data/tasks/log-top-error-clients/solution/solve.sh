#!/bin/bash
set -euo pipefail
cat > /workspace/top_errors.sh <<'SH'
#!/bin/bash
# Top client IPs by number of 5xx responses in a Combined Log Format file.
if [ $# -lt 1 ] || [ $# -gt 2 ] || [ ! -r "$1" ]; then
    echo "usage: top_errors.sh LOGFILE [N]" >&2
    exit 2
fi
n=${2:-5}
case "$n" in ''|*[!0-9]*) echo "top_errors.sh: N must be a non-negative integer" >&2; exit 2 ;; esac
LC_ALL=C gawk '
    match($0, /^([0-9]+\.[0-9]+\.[0-9]+\.[0-9]+) [^"]*\[[^]]*\] "([^"\\]|\\.)*" ([0-9]+) /, m) {
        if (m[3] >= 500 && m[3] <= 599) count[m[1]]++
    }
    END {
        for (ip in count) {
            split(ip, o, ".")
            printf "%d %s %d %d %d %d\n", count[ip], ip, o[1], o[2], o[3], o[4]
        }
    }' "$1" |
    LC_ALL=C sort -k1,1nr -k3,3n -k4,4n -k5,5n -k6,6n |
    { if [ "$n" -eq 0 ]; then cat; else head -n "$n"; fi; } |
    cut -d' ' -f1,2
SH
chmod +x /workspace/top_errors.sh
