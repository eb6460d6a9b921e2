#!/bin/bash
set -euo pipefail
cd /workspace/repo
git checkout -q main
subjects=$(git log --format=%s main)
if ! grep -qx 'Add CSV export' <<< "$subjects"; then
    # The reset left the commit in HEAD's reflog.
    reflog=$(git log -g --format='%H %s' HEAD)
    lost=$(awk '!found && $2 == "Add" && $3 == "CSV" && $4 == "export" && NF == 4 {print $1; found = 1}' <<< "$reflog")
    [ -n "$lost" ] || { echo "lost commit not found in the reflog" >&2; exit 1; }
    git cherry-pick "$lost"
fi
git status --short
