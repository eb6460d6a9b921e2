#!/bin/bash
# Validate the bundled offline datasets without the engine.
#
#   data/validate.sh                 # every TB2 task and every SWE-smith instance
#   data/validate.sh --tb2 [ID...]   # TerminalBench-2 tasks only (optionally a subset)
#   data/validate.sh --swesmith [ID...]
#   data/validate.sh ID...           # these ids (TB2 task ids or SWE-smith instance ids)
#
# TB2 task: the environment is staged into a scratch /workspace by applying the
# Dockerfile's WORKDIR / ENV / COPY lines by hand, then inside bubblewrap (real
# paths: /workspace, /tests, /logs/verifier, /solution, no network, empty /usr/local):
#   1. tests on the untouched environment        -> reward 0 expected
#   2. solution/solve.sh (cwd /workspace)         -> exit 0 expected
#   3. tests                                      -> reward 1 and exit 0 expected
#   4. solve.sh again, then tests (idempotence)   -> exit 0, reward 1 expected
# Tests run as an unprivileged user (nobody) with /workspace and /tests mounted
# read-only, as the engine's providers may do; solve.sh runs as root.
#
# SWE-smith instance: the repo is copied to a scratch /testbed and the patch applied;
# FAIL_TO_PASS must fail and PASS_TO_PASS pass; after reverse-applying the patch all pass.
#
# Prints one PASS/FAIL line per task/instance and a final "N passed, N failed".
# Requirements: bwrap, python3 (+ python3-pytest), gcc, make, git, sqlite3, gawk, patch.
set -u
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# Use the distribution python, as the sandbox does (not a pyenv/venv shim).
PY=/usr/bin/python3
[ -x "$PY" ] || PY=$(command -v python3)

DATA=$(cd "$(dirname "$0")" && pwd)
VERBOSE=${VALIDATE_VERBOSE:-0}
KEEP=${VALIDATE_KEEP:-0}
SLOW_SEC=${VALIDATE_SLOW_SEC:-10}

mode=all
ids=()
for a in "$@"; do
    case "$a" in
        --tb2) mode=tb2 ;;
        --swesmith) mode=swesmith ;;
        -v|--verbose) VERBOSE=1 ;;
        -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
        *) ids+=("$a") ;;
    esac
done

for tool in bwrap gcc make git sqlite3 gawk patch; do
    command -v "$tool" >/dev/null || { echo "validate: missing tool: $tool" >&2; exit 2; }
done
"$PY" -m pytest --version >/dev/null 2>&1 || { echo "validate: python3 -m pytest unavailable (apt-get install python3-pytest)" >&2; exit 2; }

passed=0
failed=0
SCRATCH_ROOT=$(mktemp -d /tmp/cseng-validate.XXXXXX)
chmod 755 "$SCRATCH_ROOT"
cleanup() { [ "$KEEP" = 1 ] || rm -rf "$SCRATCH_ROOT"; }
trap cleanup EXIT

# Run the verifier unprivileged when unprivileged user namespaces work; else as root
# (still with /workspace read-only).
AS_NOBODY=(setpriv --reuid=65534 --regid=65534 --clear-groups)
if ! "${AS_NOBODY[@]}" bwrap --unshare-all --ro-bind /usr /usr --symlink usr/bin /bin \
        --symlink usr/lib /lib --symlink usr/lib64 /lib64 --proc /proc --dev /dev true 2>/dev/null; then
    echo "validate: note: cannot run bwrap as nobody here; verifier runs as root with read-only /workspace" >&2
    AS_NOBODY=()
fi

# bwrap_run ROOTDIR AS_USER(root|nobody) WS_MODE(rw|ro) ENVFILE -- CMD...
bwrap_run() {
    local root=$1 who=$2 wsmode=$3 envfile=$4
    shift 5
    local args=(--unshare-all --die-with-parent --new-session
        --ro-bind /usr /usr --tmpfs /usr/local
        --symlink usr/bin /bin --symlink usr/sbin /sbin --symlink usr/lib /lib --symlink usr/lib64 /lib64
        --proc /proc --dev /dev --tmpfs /tmp --tmpfs /run
        --ro-bind /etc/alternatives /etc/alternatives
        --ro-bind /etc/passwd /etc/passwd --ro-bind /etc/group /etc/group
        --ro-bind-try /etc/ld.so.cache /etc/ld.so.cache
        --ro-bind-try /etc/localtime /etc/localtime
        --clearenv
        --setenv PATH /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
        --setenv HOME /tmp --setenv LANG C.UTF-8 --setenv TERM dumb)
    if [ "$wsmode" = ro ]; then
        args+=(--ro-bind "$root/workspace" "$WORKDIR")
    else
        args+=(--bind "$root/workspace" "$WORKDIR")
    fi
    [ -d "$root/tests" ] && args+=(--ro-bind "$root/tests" /tests)
    [ -d "$root/solution" ] && args+=(--ro-bind "$root/solution" /solution)
    [ -d "$root/logs" ] && args+=(--bind "$root/logs" /logs)
    if [ -n "$envfile" ] && [ -s "$envfile" ]; then
        local k v
        while IFS= read -r -d '' k && IFS= read -r -d '' v; do
            args+=(--setenv "$k" "$v")
        done < "$envfile"
    fi
    args+=(--chdir "$WORKDIR")
    if [ "$who" = nobody ]; then
        "${AS_NOBODY[@]}" bwrap "${args[@]}" "$@"
    else
        bwrap "${args[@]}" "$@"
    fi
}

# Print NUL-separated KEY VALUE pairs for the ENV lines of a Dockerfile plus one
# task.toml env table (verifier.env / solution.env).
env_pairs() {
    "$PY" - "$1" "$2" "$3" <<'PY'
import shlex, sys, tomllib
dockerfile, toml_path, table = sys.argv[1:4]
out = []
for line in open(dockerfile, encoding="utf-8"):
    parts = line.strip().split(None, 1)
    if len(parts) == 2 and parts[0].upper() == "ENV":
        rest = parts[1]
        if "=" in rest.split()[0]:
            for tok in shlex.split(rest):
                k, _, v = tok.partition("=")
                out.append((k, v))
        else:
            k, v = rest.split(None, 1)
            out.append((k, v.strip()))
with open(toml_path, "rb") as f:
    conf = tomllib.load(f)
sec, sub = table.split(".")
for k, v in (conf.get(sec, {}).get(sub, {}) or {}).items():
    out.append((k, str(v)))
sys.stdout.write("".join(f"{k}\0{v}\0" for k, v in out))
PY
}

# Stage environment/ into ROOT/workspace following the Dockerfile.
stage_env() {
    local task=$1 root=$2
    local df=$task/environment/Dockerfile
    mkdir -p "$root/workspace"
    local kw a b rest
    while read -r kw a b rest; do
        case "${kw^^}" in
            COPY)
                if [ -n "$rest" ] || [[ "$a" == --* ]]; then
                    echo "unsupported COPY form: $kw $a $b $rest"; return 1
                fi
                case "$b" in "$WORKDIR"|"$WORKDIR"/*) ;; *) echo "COPY destination outside $WORKDIR: $b"; return 1 ;; esac
                local src=$task/environment/${a%/}
                local dst=$root/workspace/${b#"$WORKDIR"}
                if [ -d "$src" ]; then
                    mkdir -p "$dst" && cp -a "$src/." "$dst/" || return 1
                elif [ -f "$src" ]; then
                    if [[ "$b" == */ ]]; then
                        mkdir -p "$dst" && cp -a "$src" "$dst/" || return 1
                    else
                        mkdir -p "$(dirname "$dst")" && cp -a "$src" "$dst" || return 1
                    fi
                else
                    echo "COPY source missing: $a"; return 1
                fi ;;
        esac
    done < "$df"
    return 0
}

static_checks() {
    local task=$1 f
    for f in task.toml instruction.md environment/Dockerfile solution/solve.sh tests/test.sh; do
        [ -f "$task/$f" ] || { echo "missing $f"; return 1; }
    done
    grep -qiE '^[[:space:]]*RUN[[:space:]]' "$task/environment/Dockerfile" && { echo "Dockerfile has RUN lines"; return 1; }
    grep -qE '^FROM debian:bookworm-slim[[:space:]]*$' "$task/environment/Dockerfile" || { echo "Dockerfile must be FROM debian:bookworm-slim"; return 1; }
    WORKDIR=$(awk 'toupper($1)=="WORKDIR"{w=$2} END{print w}' "$task/environment/Dockerfile")
    [ "$WORKDIR" = /workspace ] || { echo "WORKDIR must be /workspace (got '$WORKDIR')"; return 1; }
    "$PY" - "$task/task.toml" <<'PY' || return 1
import sys, tomllib
c = tomllib.load(open(sys.argv[1], "rb"))
errs = []
if c.get("version") != "1.0": errs.append("version != 1.0")
m = c.get("metadata", {})
for k in ("author_name", "difficulty", "category", "tags"):
    if k not in m: errs.append("metadata." + k + " missing")
for sec in ("verifier", "agent"):
    if "timeout_sec" not in c.get(sec, {}): errs.append(sec + ".timeout_sec missing")
e = c.get("environment", {})
want = {"cpus": 1, "memory_mb": 1024, "storage_mb": 2048, "allow_internet": False}
for k, v in want.items():
    if e.get(k) != v: errs.append(f"environment.{k} != {v!r}")
if "build_timeout_sec" not in e: errs.append("environment.build_timeout_sec missing")
if errs:
    print("; ".join(errs)); sys.exit(1)
PY
}

reward_of() { local f=$1/logs/verifier/reward.txt; [ -f "$f" ] && tr -d '[:space:]' < "$f" || echo none; }

# run_verify ROOT TASK ENVFILE -> sets V_RC, V_REWARD, V_SEC; output in ROOT/verify.log
run_verify() {
    local root=$1 task=$2 envfile=$3
    rm -rf "$root/tests" "$root/logs"
    cp -a "$task/tests" "$root/tests"
    chmod -R a+rX "$root/tests"
    mkdir -p "$root/logs/verifier"
    [ ${#AS_NOBODY[@]} -gt 0 ] && chown -R 65534:65534 "$root/logs"
    local t0=$SECONDS
    bwrap_run "$root" nobody ro "$envfile" -- bash /tests/test.sh > "$root/verify.log" 2>&1
    V_RC=$?
    V_SEC=$((SECONDS - t0))
    V_REWARD=$(reward_of "$root")
    rm -rf "$root/tests"
}

run_solve() {
    local root=$1 task=$2 envfile=$3
    rm -rf "$root/solution"
    cp -a "$task/solution" "$root/solution"
    bwrap_run "$root" root rw "$envfile" -- bash /solution/solve.sh > "$root/solve.log" 2>&1
    S_RC=$?
    rm -rf "$root/solution"
}

report() {  # report STATUS NAME DETAIL LOGFILE
    if [ "$1" = PASS ]; then
        passed=$((passed + 1)); echo "PASS $2${3:+  ($3)}"
    else
        failed=$((failed + 1)); echo "FAIL $2: $3"
        if [ -n "${4:-}" ] && [ -f "$4" ]; then tail -n 25 "$4" | sed 's/^/    | /'; fi
    fi
}

validate_task() {
    local task=$1 id
    id=$(basename "$task")
    local root=$SCRATCH_ROOT/tb2-$id
    rm -rf "$root"; mkdir -p "$root"; chmod 755 "$root"
    local msg
    if ! msg=$(static_checks "$task"); then report FAIL "$id" "static: $msg"; return; fi
    if ! msg=$(stage_env "$task" "$root"); then report FAIL "$id" "staging: $msg"; return; fi
    chmod -R a+rX "$root/workspace"
    env_pairs "$task/environment/Dockerfile" "$task/task.toml" verifier.env > "$root/verifier.env"
    env_pairs "$task/environment/Dockerfile" "$task/task.toml" solution.env > "$root/solution.env"

    run_verify "$root" "$task" "$root/verifier.env"
    [ "$VERBOSE" = 1 ] && sed 's/^/    [untouched] /' "$root/verify.log"
    if [ "$V_REWARD" != 0 ]; then report FAIL "$id" "untouched environment: reward=$V_REWARD rc=$V_RC (want reward 0)" "$root/verify.log"; return; fi
    local t_untouched=$V_SEC

    run_solve "$root" "$task" "$root/solution.env"
    [ "$VERBOSE" = 1 ] && sed 's/^/    [solve] /' "$root/solve.log"
    if [ "$S_RC" != 0 ]; then report FAIL "$id" "solve.sh exited $S_RC" "$root/solve.log"; return; fi
    run_verify "$root" "$task" "$root/verifier.env"
    [ "$VERBOSE" = 1 ] && sed 's/^/    [solved] /' "$root/verify.log"
    if [ "$V_REWARD" != 1 ] || [ "$V_RC" != 0 ]; then report FAIL "$id" "after solve: reward=$V_REWARD rc=$V_RC (want 1/0)" "$root/verify.log"; return; fi
    local t_solved=$V_SEC

    run_solve "$root" "$task" "$root/solution.env"
    if [ "$S_RC" != 0 ]; then report FAIL "$id" "second solve.sh (idempotence) exited $S_RC" "$root/solve.log"; return; fi
    run_verify "$root" "$task" "$root/verifier.env"
    if [ "$V_REWARD" != 1 ] || [ "$V_RC" != 0 ]; then report FAIL "$id" "after second solve: reward=$V_REWARD rc=$V_RC" "$root/verify.log"; return; fi

    local slow=""
    if [ "$t_untouched" -gt "$SLOW_SEC" ] || [ "$t_solved" -gt "$SLOW_SEC" ]; then slow=", SLOW"; fi
    report PASS "$id" "untouched=0 solved=1 idempotent; verify ${t_untouched}s/${t_solved}s$slow"
    [ "$KEEP" = 1 ] || rm -rf "$root"
}

# SWE-smith instances: the python helper prints "<instance_id>\t<repo>\t<source_dir>"
# rows (+ schema problems) and writes each instance's patch / test lists into the scratch dir.
validate_swesmith() {
    local jsonl=$DATA/swesmith/instances.jsonl
    [ -f "$jsonl" ] || { report FAIL swesmith "missing $jsonl"; return; }
    local listing
    if ! listing=$("$PY" - "$jsonl" "$SCRATCH_ROOT" "${ids[@]}" <<'PY'
import json, os, sys
jsonl, scratch, *wanted = sys.argv[1:]
need = {"instance_id", "repo", "base_commit", "patch", "FAIL_TO_PASS", "PASS_TO_PASS",
        "image_name", "problem_statement", "environment"}
seen = set()
for n, line in enumerate(open(jsonl, encoding="utf-8"), 1):
    if not line.strip():
        continue
    row = json.loads(line)
    missing = need - row.keys()
    iid = row.get("instance_id", f"line{n}")
    problems = []
    if missing: problems.append("missing keys " + ",".join(sorted(missing)))
    if iid in seen: problems.append("duplicate instance_id")
    seen.add(iid)
    if not iid.startswith(row.get("repo", "?") + "__"): problems.append("instance_id must be <repo>__<short>")
    if row.get("image_name") != "cseng/swesmith." + row.get("repo", ""): problems.append("image_name")
    if not row.get("FAIL_TO_PASS"): problems.append("empty FAIL_TO_PASS")
    if not str(row.get("problem_statement", "")).strip(): problems.append("empty problem_statement")
    if set(row.get("FAIL_TO_PASS", [])) & set(row.get("PASS_TO_PASS", [])): problems.append("F2P/P2P overlap")
    src = (row.get("environment") or {}).get("source_dir", "")
    if wanted and iid not in wanted:
        continue
    d = os.path.join(scratch, "swe-" + iid)
    os.makedirs(d, exist_ok=True)
    open(os.path.join(d, "patch.diff"), "w").write(row.get("patch", ""))
    open(os.path.join(d, "f2p.txt"), "w").write("".join(t + "\n" for t in row.get("FAIL_TO_PASS", [])))
    open(os.path.join(d, "p2p.txt"), "w").write("".join(t + "\n" for t in row.get("PASS_TO_PASS", [])))
    print(f"{iid}\t{row.get('repo', '')}\t{src}\t{'; '.join(problems)}")
PY
    ); then report FAIL swesmith "cannot parse $jsonl"; return; fi

    local iid repo src problems
    while IFS=$'\t' read -r iid repo src problems; do
        [ -n "$iid" ] || continue
        local root=$SCRATCH_ROOT/swe-$iid
        chmod 755 "$root"
        if [ -n "$problems" ]; then report FAIL "$iid" "schema: $problems"; continue; fi
        if [ ! -d "$DATA/$src" ]; then report FAIL "$iid" "source_dir missing: $src"; continue; fi
        mkdir -p "$root/workspace"
        cp -a "$DATA/$src/." "$root/workspace/"
        find "$root/workspace" \( -name __pycache__ -o -name .pytest_cache \) -prune -exec rm -rf {} +
        if ! (cd "$root/workspace" && git apply --check -p1 "$root/patch.diff" 2>"$root/apply.log" \
                && patch -p1 -s --no-backup-if-mismatch < "$root/patch.diff" >>"$root/apply.log" 2>&1); then
            report FAIL "$iid" "patch does not apply" "$root/apply.log"; continue
        fi
        chmod -R a+rX "$root/workspace"
        local tests=()
        mapfile -t tests < <(cat "$root/f2p.txt" "$root/p2p.txt")
        WORKDIR=/testbed
        bwrap_run "$root" nobody ro "" -- env PYTHONDONTWRITEBYTECODE=1 \
            python3 -m pytest -q -rA -p no:cacheprovider "${tests[@]}" > "$root/buggy.log" 2>&1
        local verdict
        verdict=$("$PY" - "$root/buggy.log" "$root/f2p.txt" "$root/p2p.txt" <<'PY'
import re, sys
log, f2p, p2p = sys.argv[1:]
status = {}
for line in open(log, encoding="utf-8", errors="replace"):
    m = re.match(r"^(PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (\S+)", line)
    if m:
        status.setdefault(m.group(2), m.group(1))
bad = []
for t in open(f2p).read().split():
    if status.get(t) not in ("FAILED", "ERROR"): bad.append(f"F2P {t}: {status.get(t, 'not run')}")
for t in open(p2p).read().split():
    if status.get(t) != "PASSED": bad.append(f"P2P {t}: {status.get(t, 'not run')}")
print("; ".join(bad[:5]) + (f" (+{len(bad) - 5} more)" if len(bad) > 5 else ""))
PY
)
        if [ -n "$verdict" ]; then report FAIL "$iid" "buggy state: $verdict" "$root/buggy.log"; WORKDIR=/workspace; continue; fi
        if ! (cd "$root/workspace" && patch -R -p1 -s --no-backup-if-mismatch < "$root/patch.diff" >"$root/revert.log" 2>&1); then
            report FAIL "$iid" "patch does not reverse-apply" "$root/revert.log"; WORKDIR=/workspace; continue
        fi
        if ! diff -r -x __pycache__ -x .pytest_cache "$DATA/$src" "$root/workspace" > "$root/revert.diff" 2>&1; then
            report FAIL "$iid" "reverse-applied tree differs from the clean repo" "$root/revert.diff"; WORKDIR=/workspace; continue
        fi
        chmod -R a+rX "$root/workspace"
        local t0=$SECONDS
        bwrap_run "$root" nobody ro "" -- env PYTHONDONTWRITEBYTECODE=1 \
            python3 -m pytest -q -rA -p no:cacheprovider "${tests[@]}" > "$root/fixed.log" 2>&1
        local rc=$? dt=$((SECONDS - t0))
        WORKDIR=/workspace
        if [ "$rc" != 0 ]; then report FAIL "$iid" "gold (reverse-applied) state: pytest exited $rc" "$root/fixed.log"; continue; fi
        report PASS "$iid" "$(wc -l < "$root/f2p.txt") F2P fail->pass, $(wc -l < "$root/p2p.txt") P2P pass; gold run ${dt}s"
        [ "$KEEP" = 1 ] || rm -rf "$root"
    done <<< "$listing"
}

WORKDIR=/workspace
if [ "$mode" != swesmith ]; then
    for task in "$DATA"/tasks/*/; do
        task=${task%/}
        id=$(basename "$task")
        if [ ${#ids[@]} -gt 0 ]; then
            hit=0; for w in "${ids[@]}"; do [ "$w" = "$id" ] && hit=1; done
            [ "$hit" = 1 ] || continue
        fi
        validate_task "$task"
    done
fi
if [ "$mode" != tb2 ]; then
    if [ ${#ids[@]} -eq 0 ] || printf '%s\n' "${ids[@]}" | grep -q '__'; then
        validate_swesmith
    fi
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
