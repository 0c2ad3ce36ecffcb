#!/usr/bin/env bash
# Installs what is missing, builds, and runs every Tern test:
#   1. debug-checked build (TERN_ASSERT on): unit, conformance and app tests;
#   2. ASan+UBSan build: the same suites;
#   3. TSan build: the suites that run code on more than one thread.
# Exits non-zero on the first failing stage. TERN_TEST_QUICK=1 runs stage 1 only.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
"$top/scripts/setup.sh"

stage() { echo; echo "=== $*"; }
jobs=$(nproc)

stage "debug build (build-test/)"
scripts/build.sh build-test -Dbuildtype=debugoptimized -Dbenchmarks=true
meson test -C build-test --no-rebuild --print-errorlogs --num-processes "$jobs" --suite unit --suite conformance --suite functional --suite apps

if [[ "${TERN_TEST_QUICK:-0}" == 1 ]]; then
  echo "TERN_TEST_QUICK=1: sanitizer stages not run"
  exit 0
fi

stage "ASan+UBSan build (build-asan/)"
scripts/build.sh build-asan -Dbuildtype=debug -Db_sanitize=address,undefined -Db_lundef=false \
  -Dbenchmarks=false -Dapps=true
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  meson test -C build-asan --no-rebuild --print-errorlogs --num-processes "$jobs" --suite unit --suite conformance --suite functional --suite apps

stage "TSan build (build-tsan/)"
scripts/build.sh build-tsan -Dbuildtype=debug -Db_sanitize=thread -Db_lundef=false \
  -Dbenchmarks=false -Dapps=false
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
  meson test -C build-tsan --no-rebuild --print-errorlogs --num-processes "$jobs" --suite unit --suite conformance --suite functional

echo
echo "all test stages passed"
