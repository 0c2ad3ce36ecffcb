#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz, clang, ASan+UBSan) in build-fuzz/
# and runs each one twice:
#   1. over its committed corpus, tests/fuzz/corpus/<target>/, as a regression
#      suite: every file must run without a crash;
#   2. fuzzing for a bounded time, from a scratch copy of that corpus (the
#      tree is never written).
# Exits non-zero when any target crashes, leaks or times out, and prints the
# path of the input that did it. docs/fuzzing.md says more.
#
#   scripts/fuzz.sh [TARGET...]       (default: every target)
#   scripts/fuzz.sh --build-only [TARGET...]   builds them and stops
#                      (scripts/test.sh builds them beside other stages,
#                      then runs this script, whose build is then a no-op)
# Environment:
#   TERN_FUZZ_SECONDS  fuzzing time per target (default 30; 0: corpus only)
#   TERN_FUZZ_RSS_MB   memory limit per target (default 2048)
#   TERN_FUZZ_JOBS     targets run side by side (default: one per core)
#   TERN_FUZZ_KEEP     directory to keep the grown corpora in (default: a
#                      temporary one, removed at the end)
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
"$top/scripts/setup.sh" --fuzz

seconds=${TERN_FUZZ_SECONDS:-30}
rss=${TERN_FUZZ_RSS_MB:-2048}
jobs=${TERN_FUZZ_JOBS:-$(nproc)}
build=build-fuzz
all_targets=(rpcrdma_header oncrpc cm_private nfs_compound nfs3 shm_ctl shm_desc)
build_only=0
if [[ ${1:-} == --build-only ]]; then build_only=1; shift; fi
targets=("$@")
((${#targets[@]} > 0)) || targets=("${all_targets[@]}")

# Only the targets to run and what they link (libtern.a): libtern_nfsd,
# libtern_runtime, libtern.so and the two helper programs (the seed generator,
# the svcrdma capture tool) are a third of this build's compiler time and
# nothing here runs them (`ninja -C build-fuzz` builds them when wanted).
# -g1: line tables, which is all a crash report's stack needs; full -g costs
# ~25% more compiler time (docs/testing.md).
echo "=== fuzz: building $build/ (clang, ASan+UBSan, libFuzzer)"
CC=clang CXX=clang++ scripts/build.sh "$build" -Dfuzzers=true -Dtests=false -Dapps=false -Dbenchmarks=false \
  -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debugoptimized -Dunity_libs=true \
  -Dc_args=-g1 -Dcpp_args=-g1 -- "${targets[@]/#/tests/fuzz/fuzz_}"
((build_only == 0)) || exit 0

scratch=$(mktemp -d /tmp/tern-fuzz.XXXXXX)
keep=${TERN_FUZZ_KEEP:-}
cleanup() { rm -rf "$scratch"; }
trap cleanup EXIT
artifacts=$top/$build/fuzz-artifacts
mkdir -p "$artifacts"

export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}

# The figure libFuzzer prints with -print_final_stats=1.
final_stat() { sed -n "s/^stat::$1: *//p" "$2" | tail -1; }

# One target: its corpus, then fuzzing. Writes what it has to say to
# $scratch/$t.out and one line "STATUS EXECS SUMMARY..." to $scratch/$t.result
# (STATUS ok or fail), so that targets can run side by side and still report
# in order.
run_target() {
  local t=$1 bin corpus log nfiles work rc execs rate new
  bin=$build/tests/fuzz/fuzz_$t
  corpus=tests/fuzz/corpus/$t
  log=$scratch/$t.log
  nfiles=$(find "$corpus" -type f | wc -l)

  # 1. The committed corpus, each file once.
  if ! "$bin" -runs=0 -rss_limit_mb="$rss" -timeout=25 -artifact_prefix="$artifacts/$t-" "$corpus" >"$log" 2>&1; then
    echo "fuzz: $t: FAILED on its committed corpus ($corpus):"
    tail -30 "$log"
    grep -o "Test unit written to .*" "$log" || true
    echo "fail 0 $t: corpus of $nfiles FAILED" >"$scratch/$t.result"
    return
  fi

  if ((seconds == 0)); then
    echo "ok 0 $t: corpus of $nfiles ok" >"$scratch/$t.result"
    return
  fi

  # 2. Fuzzing from a copy of it.
  work=$scratch/corpus-$t
  cp -r "$corpus" "$work"
  rc=0
  "$bin" -max_total_time="$seconds" -rss_limit_mb="$rss" -timeout=25 -print_final_stats=1 \
    -artifact_prefix="$artifacts/$t-" "$work" >"$log" 2>&1 || rc=$?
  execs=$(final_stat number_of_executed_units "$log")
  rate=$(final_stat average_exec_per_sec "$log")
  execs=${execs:-0}
  if ((rc != 0)); then
    echo "fuzz: $t: CRASH after $execs executions (exit $rc):"
    grep -E "ERROR|FUZZ_CHECK|SUMMARY|runtime error" "$log" | head -10 || true
    grep -o "Test unit written to .*" "$log" || echo "fuzz: (no test unit written; log: $log)"
    cp "$log" "$artifacts/$t.log"
    echo "fuzz: full log: $artifacts/$t.log"
    echo "fail $execs $t: CRASH after $execs executions" >"$scratch/$t.result"
  else
    new=$(($(find "$work" -type f | wc -l) - nfiles))
    echo "fuzz: $t: corpus of $nfiles ok; $execs executions in ${seconds}s (${rate:-?}/s), $new new inputs"
    echo "ok $execs $t: $execs executions" >"$scratch/$t.result"
  fi
  if [[ -n $keep ]]; then
    mkdir -p "$keep/$t"
    cp -r "$work/." "$keep/$t/"
  fi
}

for t in "${targets[@]}"; do
  [[ -x $build/tests/fuzz/fuzz_$t ]] || { echo "fuzz: no target $t ($build/tests/fuzz/fuzz_$t)" >&2; exit 1; }
done
# Each libFuzzer process runs on one thread: TERN_FUZZ_JOBS of them (default:
# one per core) side by side, each with its whole time budget, so the stage
# takes the budget times targets / jobs instead of times targets.
echo "=== fuzz: ${#targets[@]} targets, $jobs at a time, ${seconds}s of fuzzing each"
running=0
for t in "${targets[@]}"; do
  if ((running >= jobs)); then
    wait -n || true
    running=$((running - 1))
  fi
  run_target "$t" >"$scratch/$t.out" 2>&1 &
  running=$((running + 1))
done
wait

passed=0
failed=0
total_execs=0
summary=()
for t in "${targets[@]}"; do
  cat "$scratch/$t.out"
  if [[ ! -f $scratch/$t.result ]]; then
    echo "fuzz: $t: no result (the runner itself failed)"
    failed=$((failed + 1))
    summary+=("$t: NO RESULT")
    continue
  fi
  read -r status execs line <"$scratch/$t.result"
  total_execs=$((total_execs + execs))
  summary+=("$line")
  if [[ $status == ok ]]; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
done

echo
printf '  %s\n' "${summary[@]}"
echo "fuzz: $total_execs executions in all; $passed passed, $failed failed"
((failed == 0))
