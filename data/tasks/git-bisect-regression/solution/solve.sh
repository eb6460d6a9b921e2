#!/bin/bash
set -euo pipefail
cd /workspace/repo
git bisect reset >/dev/null 2>&1 || true
git checkout -q main
if [ ! -s /workspace/FIRST_BAD ]; then
    # check.py is unchanged since the first commit, so each bisect step runs the same check.
    git bisect start main v1.0 >/dev/null
    git bisect run python3 check.py > /tmp/bisect.log 2>&1 || true
    first_bad=$(git rev-parse refs/bisect/bad)
    git bisect reset >/dev/null
    echo "$first_bad" > /workspace/FIRST_BAD
fi
cat /workspace/FIRST_BAD
if ! python3 check.py >/dev/null; then
    sed -i 's/^_NON_ALNUM = re.compile(r"\[^a-z0-9\]")$/_NON_ALNUM = re.compile(r"[^a-z0-9]+")/' slug.py
    python3 check.py
    git commit -q -am "Collapse runs of separators again"
fi
git status --short
