#!/bin/bash
set -euo pipefail
cat > /workspace/rotate.sh <<'SH'
#!/bin/bash
# Prune backups: keep the KEEP newest and the newest of every calendar month.
set -u
export LC_ALL=C
dry=0
if [ "${1:-}" = --dry-run ]; then
    dry=1
    shift
fi
if [ $# -ne 2 ]; then
    echo "usage: rotate.sh [--dry-run] DIR KEEP" >&2
    exit 2
fi
dir=$1 keep=$2
if [ ! -d "$dir" ]; then
    echo "rotate.sh: not a directory: $dir" >&2
    exit 2
fi
case "$keep" in
    ''|*[!0-9]*) echo "rotate.sh: KEEP must be a non-negative integer: $keep" >&2; exit 2 ;;
esac
keep=$((10#$keep))

backups=()
for path in "$dir"/backup-*.tar.gz; do
    name=${path##*/}
    [[ $name =~ ^backup-[0-9]{8}-[0-9]{6}\.tar\.gz$ ]] || continue
    [ -f "$path" ] && [ ! -L "$path" ] || continue
    backups+=("$name")
done
# Glob results are sorted by name, i.e. by time stamp, oldest first.
n=${#backups[@]}
declare -A newest_of_month=()
for ((i = 0; i < n; i++)); do
    name=${backups[i]}
    newest_of_month[${name:7:6}]=$name   # later entries overwrite: newest wins
done
status=0
for ((i = 0; i < n; i++)); do
    name=${backups[i]}
    if (( i >= n - keep )) || [ "${newest_of_month[${name:7:6}]}" = "$name" ]; then
        continue
    fi
    echo "$name"
    if [ "$dry" = 0 ]; then
        rm -f -- "$dir/$name" || status=1
    fi
done
exit $status
SH
chmod +x /workspace/rotate.sh
