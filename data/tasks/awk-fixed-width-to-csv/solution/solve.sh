#!/bin/bash
set -euo pipefail
cat > /workspace/fw2csv.sh <<'SH'
#!/bin/bash
# Fixed-width ledger report -> CSV.
if [ $# -ne 1 ] || [ ! -r "$1" ]; then
    echo "usage: fw2csv.sh FILE" >&2
    exit 2
fi
LC_ALL=C.UTF-8 gawk '
function trim(s) { sub(/^ +/, "", s); sub(/ +$/, "", s); return s }
BEGIN { print "account,name,balance,date" }
{
    line = $0
    sub(/^\f+/, "", line)
    if (line !~ /^[0-9]{9} /) next
    acct = substr(line, 1, 9)
    name = trim(substr(line, 11, 29))
    bal = substr(line, 41, 14)
    date = substr(line, 56, 10)
    if (name ~ /[,"]/) { gsub(/"/, "\"\"", name); name = "\"" name "\"" }
    neg = (bal ~ /-$/)
    gsub(/[ ,-]/, "", bal)
    if (neg) bal = "-" bal
    if (date ~ /^[0-9][0-9]\/[0-9][0-9]\/[0-9][0-9][0-9][0-9]$/)
        date = substr(date, 7, 4) "-" substr(date, 4, 2) "-" substr(date, 1, 2)
    else
        date = ""
    print acct "," name "," bal "," date
}' "$1"
SH
chmod +x /workspace/fw2csv.sh
