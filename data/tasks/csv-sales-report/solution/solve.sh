#!/bin/bash
set -euo pipefail
cat > /workspace/report.sh <<'SH'
#!/bin/bash
# Regional sales report from an orders CSV export.
if [ $# -ne 1 ] || [ ! -r "$1" ]; then
    echo "usage: report.sh INPUT.csv" >&2
    exit 2
fi
exec python3 - "$1" <<'PY'
import csv, sys
from decimal import Decimal

stats = {}
with open(sys.argv[1], newline="", encoding="utf-8") as f:
    for row in csv.DictReader(f):
        if row["status"] != "complete":
            continue
        region = row["region"].strip().capitalize()
        qty = int(row["quantity"])
        s = stats.setdefault(region, [0, 0, Decimal(0)])
        s[0] += 1
        s[1] += qty
        s[2] += qty * Decimal(row["unit_price"])
out = csv.writer(sys.stdout, lineterminator="\n")
out.writerow(["region", "orders", "units", "revenue"])
for region, (orders, units, revenue) in sorted(stats.items(), key=lambda kv: (-kv[1][2], kv[0])):
    out.writerow([region, orders, units, f"{revenue:.2f}"])
PY
SH
chmod +x /workspace/report.sh
