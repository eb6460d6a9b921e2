#!/usr/bin/env bash
# Runs every test suite, prints each suite's result line, and ends with the plain total
# "N passed, N failed" (CI reads that last line). Suites: c (C unit tests), specs (busted
# specs inside cseng, one process per spec file, each under SPEC_TIMEOUT seconds, CHECK_JOBS
# files at a time), fuzz (short libFuzzer runs: beside the specs when CHECK_JOBS > 1, else
# FUZZ_JOBS at a time, default one per core).
# CSENG_SUITES="c specs fuzz" selects; CSENG_SPECS="spec/a_spec.lua ..." narrows the specs.
# Logs: build/check/<suite>.log.
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

# The fuzzers: one process each, for FUZZ_SECONDS each, $1 at a time; each log ends with its
# result line. Tallied by the fuzz suite, in name order.
run_fuzzers() {
  local f n
  for f in build/fuzz/*_fuzz; do
    [ -x "$f" ] || continue
    n=$(basename "$f" _fuzz)
    mkdir -p "build/fuzz/corpus-$n"
    (
      if "$f" -max_total_time="$FUZZ_SECONDS" "build/fuzz/corpus-$n" "fuzz/corpus/$n" >"build/check/fuzz-$n.log" 2>&1; then
        echo "1 passed, 0 failed" >>"build/check/fuzz-$n.log"
      else
        echo "0 passed, 1 failed" >>"build/check/fuzz-$n.log"
      fi
    ) &
    while [ "$(jobs -rp | wc -l)" -ge "$1" ]; do wait -n; done
  done
  wait
}

# With specs two or more at a time, the fuzzers run beside them, one at a time, from the start
# (a fuzzer's verdict does not depend on the time it gets); the fuzz suite then waits for them.
# Otherwise they run in their turn, FUZZ_JOBS at a time.
fuzz_lane=
case " $SUITES " in *" specs "*)
  case " $SUITES " in *" fuzz "*)
    if [ "${CHECK_JOBS:-1}" -gt 1 ] && [ "$FUZZ_SECONDS" -gt 0 ] 2>/dev/null; then
      run_fuzzers 1 &
      fuzz_lane=$!
    fi ;;
  esac ;;
esac

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
      # one process per spec file: a hang or crash costs that file only (counted as a failure).
      # CHECK_JOBS files at a time (default 1), taken in order by whichever slot frees first;
      # each is tallied as it ends, with its wall seconds.
      jobs_max=${CHECK_JOBS:-1}
      declare -A spec_of=() start_of=()
      run_spec() {
        timeout --kill-after=15 "${SPEC_TIMEOUT:-900}" "$CSENG" test "$1" >"build/check/$2.log" 2>&1
        [ $? -eq 124 ] && echo "0 passed, 1 failed (timed out after ${SPEC_TIMEOUT:-900}s)" >>"build/check/$2.log"
        return 0
      }
      reap() {
        local pid n
        wait -n -p pid "${!spec_of[@]}"
        n=${spec_of[$pid]}
        tally "$n ($(( $(date +%s) - start_of[$pid] ))s)" "build/check/$n.log"
        unset "spec_of[$pid]" "start_of[$pid]"
      }
      for f in ${CSENG_SPECS:-spec/*_spec.lua}; do
        while [ "${#spec_of[@]}" -ge "$jobs_max" ]; do reap; done
        n=$(basename "$f" .lua)
        run_spec "$f" "$n" &
        spec_of[$!]=$n
        start_of[$!]=$(date +%s)
      done
      while [ "${#spec_of[@]}" -gt 0 ]; do reap; done ;;
    fuzz)
      [ "$FUZZ_SECONDS" -gt 0 ] 2>/dev/null || continue
      if [ -n "$fuzz_lane" ]; then wait "$fuzz_lane"; else run_fuzzers "${FUZZ_JOBS:-$(nproc)}"; fi
      for f in build/fuzz/*_fuzz; do
        [ -x "$f" ] || continue
        n=$(basename "$f" _fuzz)
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
