#!/bin/bash
set -euo pipefail
cat > /workspace/linecount.sh <<'SH'
#!/bin/bash
# Print "<lines> <relative path>" for every regular *.txt file under DIR,
# biggest first (ties by path, byte order), then "TOTAL <sum>".
export LC_ALL=C
if [ $# -ne 1 ] || [ ! -d "$1" ]; then
    echo "usage: linecount.sh DIR (DIR must be a directory)" >&2
    exit 2
fi
cd -- "$1" || exit 2
tab=$'\t'
total=0
rows=""
while IFS= read -r -d '' f; do
    # newline characters, as wc -l counts them, without a process per file
    mapfile lines < "$f"
    n=${#lines[@]}
    if [ "$n" -gt 0 ] && [[ ${lines[n-1]} != *$'\n' ]]; then n=$((n - 1)); fi
    total=$((total + n))
    rows+="$n$tab${f#./}"$'\n'
done < <(find . -type f -name '*.txt' -print0)
if [ -n "$rows" ]; then
    printf '%s' "$rows" | sort -t "$tab" -k1,1nr -k2 | while IFS= read -r line; do
        printf '%s %s\n' "${line%%"$tab"*}" "${line#*"$tab"}"
    done
fi
echo "TOTAL $total"
SH
chmod +x /workspace/linecount.sh
