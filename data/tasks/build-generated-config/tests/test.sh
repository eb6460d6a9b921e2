#!/bin/bash
# Verifier. Runs with cwd /workspace, possibly as a non-root user: never writes
# under /workspace (scratch space comes from mktemp/pytest tmp_path under /tmp).
export PYTHONDONTWRITEBYTECODE=1
mkdir -p /logs/verifier
cd /workspace 2>/dev/null || true
python3 -m pytest -q -rA -p no:cacheprovider /tests/test_outputs.py
rc=$?
if [ "$rc" -eq 0 ]; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
exit "$rc"
