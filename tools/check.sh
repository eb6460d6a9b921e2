#!/usr/bin/env bash
# Runs every test suite, prints each suite's result line as "suite k/N NAME: ..." (k counts the
# suites ended so far), and ends with the plain total "N passed, N failed" as its last line,
# whatever happens: a failed step before the suites (CHECK_FAILED_STEPS, from the Makefile's
# check target: each counts as one failure; a failed build runs no suite), a crashed or timed-out
# spec (one failure), the step after them (CHECK_AFTER, e.g. tools/docker-down.sh: its failure
# counts), an interrupt (the suites not run count as one failure; exit 130).
# Suites: c (C unit tests), specs (busted specs inside cseng, one process per spec file, each
# under SPEC_TIMEOUT seconds, CHECK_JOBS files at a time), fuzz (short libFuzzer runs: beside the
# specs when CHECK_JOBS > 1, else FUZZ_JOBS at a time, default one per core).
# A spec must leave results/ and the checkout as they were: a file a spec file adds to results/,
# or a change to the checkout (git status) while it ran, fails it, naming the files.
# CSENG_SUITES="c specs fuzz" selects; CSENG_SPECS="spec/run/frame_spec.lua ..." narrows the specs
# (default: every *_spec.lua below spec/, in path order; a spec's NAME is its path below spec/).
# Logs: build/check/<suite>.log (a spec's: build/check/<NAME>.log).
set -u
export CSENG_STRICT_CODES=1 # a failed trial record must carry a registered error_code (lua/cseng/results/log.lua)
export CSENG_STRICT_RECORDS=1 # a write to a field a record does not declare raises (lua/cseng/run/records.lua)
CSENG=${CSENG:-./cseng}
SUITES=${CSENG_SUITES:-"c specs fuzz"}
FUZZ_SECONDS=${FUZZ_SECONDS:-0}
mkdir -p build/check
passed=0 failed=0 skipped=0 ended=0 total=0 finished=

has_suite() { case " $SUITES " in *" $1 "*) return 0 ;; esac; return 1; }
# the spec files: CSENG_SPECS, else every *_spec.lua below spec/ (not in npm trees or spec/tmp)
spec_files() {
  if [ -n "${CSENG_SPECS:-}" ]; then echo "$CSENG_SPECS"; return; fi
  find spec \( -name node_modules -o -path spec/tmp \) -prune -o -name '*_spec.lua' -print | LC_ALL=C sort
}
# a spec's name: its path below spec/ without .lua (spec/run/frame_spec.lua -> run/frame_spec)
spec_name() { local n=${1#./}; n=${n#spec/}; echo "${n%.lua}"; }
fuzzing() { has_suite fuzz && [ "$FUZZ_SECONDS" -gt 0 ] 2>/dev/null; }
build_failed() { case " ${CHECK_FAILED_STEPS:-} " in *" build "*) return 0 ;; esac; return 1; }

# N: every suite this run will tally
for step in ${CHECK_FAILED_STEPS:-}; do total=$((total + 1)); done
if ! build_failed; then
  if has_suite c; then for t in build/test/*_test; do [ -x "$t" ] && total=$((total + 1)); done; fi
  if has_suite specs; then for f in $(spec_files); do total=$((total + 1)); done; fi
  if fuzzing; then for f in build/fuzz/*_fuzz; do [ -x "$f" ] && total=$((total + 1)); done; fi
fi

# the last line: the total (printed once, also on an interrupt)
print_total() {
  [ -n "$finished" ] && return
  finished=1
  if [ -n "${CHECK_AFTER:-}" ]; then
    if ! eval "$CHECK_AFTER" >>build/check/after.log 2>&1; then
      echo "after the suites: '$CHECK_AFTER' failed (build/check/after.log); counted as 1 failure"
      failed=$((failed + 1))
    fi
  fi
  if [ "$skipped" -gt 0 ]; then
    echo "$passed passed, $failed failed, $skipped skipped"
  else
    echo "$passed passed, $failed failed"
  fi
}

kill_tree() { # $1 = pid: its descendants first, then it
  local c
  for c in $(pgrep -P "$1"); do kill_tree "$c"; done
  kill "$1" 2>/dev/null
}

interrupted() { # $1 = the signal's exit status
  trap - INT TERM
  local pid
  for pid in $(jobs -pr); do kill_tree "$pid"; done
  echo "interrupted: $((total - ended)) of $total suites did not end; counted as 1 failure"
  failed=$((failed + 1))
  print_total
  exit "$1"
}
trap 'interrupted 130' INT
trap 'interrupted 143' TERM

# one suite's line: "suite k/N name: <its result line>"
suite_line() { # $1 = name, $2 = text
  ended=$((ended + 1))
  echo "suite $ended/$total $1: $2"
}

tally() { # $1 = suite name, $2 = log file
  local line p f s
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$2" | tail -n 1)
  if [ -z "$line" ]; then
    suite_line "$1" "no result line (crashed?); counted as 1 failure; see $2"
    failed=$((failed + 1)); return
  fi
  p=$(sed -E 's/^([0-9]+) passed.*/\1/' <<<"$line")
  f=$(sed -E 's/.* ([0-9]+) failed.*/\1/' <<<"$line")
  s=$(grep -oE '[0-9]+ skipped' <<<"$line" | grep -oE '[0-9]+' || echo 0)
  passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + ${s:-0}))
  suite_line "$1" "$line"
  if [ "$f" -gt 0 ]; then # show why, briefly (the whole log stays in build/check/)
    grep -E -A10 '^(Failure|Error) ->' "$2" | head -n 60 | sed 's/^/    /'
  fi
}

# What a spec may not change: the files in results/ (but its README) and the checkout's state.
tree_state() {
  local f
  for f in results/* results/.[!.]*; do
    [ -e "$f" ] && [ "$f" != results/README.md ] && echo "$f"
  done
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git status --porcelain=v1 --untracked-files=all 2>/dev/null | sed 's/^/git: /'
    echo "git: tracked content $(git diff --no-ext-diff HEAD 2>/dev/null | cksum | cut -d' ' -f1)"
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

for step in ${CHECK_FAILED_STEPS:-}; do
  suite_line "make $step" "failed before the suites (its output is above); counted as 1 failure"
  failed=$((failed + 1))
done
if build_failed; then
  echo "the build failed: no suite ran"
  print_total
  exit 1
fi

# With specs two or more at a time, the fuzzers run beside them, one at a time, from the start
# (a fuzzer's verdict does not depend on the time it gets); the fuzz suite then waits for them.
# Otherwise they run in their turn, FUZZ_JOBS at a time.
fuzz_lane=
if has_suite specs && fuzzing && [ "${CHECK_JOBS:-1}" -gt 1 ]; then
  run_fuzzers 1 &
  fuzz_lane=$!
fi

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
      tree_state | sort >build/check/tree.before
      cp build/check/tree.before build/check/tree.seen
      run_spec() {
        mkdir -p "$(dirname "build/check/$2.log")"
        timeout --kill-after=15 "${SPEC_TIMEOUT:-900}" "$CSENG" test "$1" >"build/check/$2.log" 2>&1
        [ $? -eq 124 ] && echo "0 passed, 1 failed (timed out after ${SPEC_TIMEOUT:-900}s)" >>"build/check/$2.log"
        return 0
      }
      reap() {
        local pid n others new
        wait -n -p pid "${!spec_of[@]}"
        n=${spec_of[$pid]}
        tally "$n ($(( $(date +%s) - start_of[$pid] ))s)" "build/check/$n.log"
        unset "spec_of[$pid]" "start_of[$pid]"
        # what appeared since the last look: this spec's doing, or one running beside it
        tree_state | sort >build/check/tree.now
        new=$(comm -13 build/check/tree.seen build/check/tree.now)
        if [ -n "$new" ]; then
          others=${spec_of[*]:-}
          echo "    $n${others:+ (or $others, running beside it)} changed what a spec must leave alone; counted as 1 failure:"
          sed 's/^/      /' <<<"$new"
          failed=$((failed + 1))
          sort -u build/check/tree.seen build/check/tree.now -o build/check/tree.seen
        fi
      }
      for f in $(spec_files); do
        while [ "${#spec_of[@]}" -ge "$jobs_max" ]; do reap; done
        n=$(spec_name "$f")
        run_spec "$f" "$n" &
        spec_of[$!]=$n
        start_of[$!]=$(date +%s)
      done
      while [ "${#spec_of[@]}" -gt 0 ]; do reap; done ;;
    fuzz)
      fuzzing || continue
      if [ -n "$fuzz_lane" ]; then wait "$fuzz_lane"; else run_fuzzers "${FUZZ_JOBS:-$(nproc)}"; fi
      for f in build/fuzz/*_fuzz; do
        [ -x "$f" ] || continue
        n=$(basename "$f" _fuzz)
        tally "fuzz/$n (${FUZZ_SECONDS}s)" "build/check/fuzz-$n.log"
      done ;;
  esac
done
print_total
[ "$failed" -eq 0 ]
