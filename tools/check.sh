#!/usr/bin/env bash
# Runs every test suite, prints each suite's result line, and ends with the plain total
# "N passed, N failed" (CI reads that last line). Suites: c (C unit tests), specs (busted
# specs inside cseng, one process per spec file, each under SPEC_TIMEOUT seconds), fuzz
# (short libFuzzer runs). CSENG_SUITES="c specs fuzz" selects; CSENG_SPECS="spec/a_spec.lua ..."
# narrows the specs. Logs: build/check/<suite>.log.
set -u
export CSENG_STRICT_CODES=1 # a failed trial record must carry a registered error_code (lua/cseng/results/log.lua)
CSENG=${CSENG:-./cseng}
SUITES=${CSENG_SUITES:-"c specs fuzz"}
FUZZ_SECONDS=${FUZZ_SECONDS:-0}
mkdir -p build/check
passed=0 failed=0 skipped=0

tally() { # $1 = suite name, $2 = log file
  local line p f s
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$2" | tail -n 1)
  if [ -z "$line" ]; then
    echo "suite $1: no result line (crashed?); counted as 1 failure; see $2"
    failed=$((failed + 1)); return
  fi
  p=$(sed -E 's/^([0-9]+) passed.*/\1/' <<<"$line")
  f=$(sed -E 's/.* ([0-9]+) failed.*/\1/' <<<"$line")
  s=$(grep -oE '[0-9]+ skipped' <<<"$line" | grep -oE '[0-9]+' || echo 0)
  passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + ${s:-0}))
  echo "suite $1: $line"
  if [ "$f" -gt 0 ]; then # show why, briefly (the whole log stays in build/check/)
    grep -E -A10 '^(Failure|Error) ->' "$2" | head -n 60 | sed 's/^/    /'
  fi
}

for suite in $SUITES; do
  case $suite in
    c)
      for t in build/test/*_test; do
        [ -x "$t" ] || continue
        n=$(basename "$t")
        "$t" >"build/check/$n.log" 2>&1
        tally "c/$n" "build/check/$n.log"
      done ;;
    specs)
      # one process per spec file: a hang or crash costs that file only (counted as a failure)
      for f in ${CSENG_SPECS:-spec/*_spec.lua}; do
        n=$(basename "$f" .lua)
        start=$(date +%s)
        timeout --kill-after=15 "${SPEC_TIMEOUT:-900}" "$CSENG" test "$f" >"build/check/$n.log" 2>&1
        rc=$?
        [ $rc -eq 124 ] && echo "0 passed, 1 failed (timed out after ${SPEC_TIMEOUT:-900}s)" >>"build/check/$n.log"
        tally "$n ($(( $(date +%s) - start ))s)" "build/check/$n.log"
      done ;;
    fuzz)
      [ "$FUZZ_SECONDS" -gt 0 ] 2>/dev/null || continue
      for f in build/fuzz/*_fuzz; do
        [ -x "$f" ] || continue
        n=$(basename "$f" _fuzz)
        mkdir -p "build/fuzz/corpus-$n"
        if "$f" -max_total_time="$FUZZ_SECONDS" "build/fuzz/corpus-$n" "fuzz/corpus/$n" >"build/check/fuzz-$n.log" 2>&1; then
          echo "1 passed, 0 failed" >>"build/check/fuzz-$n.log"
        else
          echo "0 passed, 1 failed" >>"build/check/fuzz-$n.log"
        fi
        tally "fuzz/$n (${FUZZ_SECONDS}s)" "build/check/fuzz-$n.log"
      done ;;
  esac
done
if [ "$skipped" -gt 0 ]; then
  echo "$passed passed, $failed failed, $skipped skipped"
else
  echo "$passed passed, $failed failed"
fi
[ "$failed" -eq 0 ]
