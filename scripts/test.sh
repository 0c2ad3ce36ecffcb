#!/usr/bin/env bash
# Installs what is missing, builds, and runs every Tern test:
#   1. debug-checked build (TERN_ASSERT on): unit, conformance and app tests
#      (the app suite installs the build and links programs against it with
#      pkg-config alone: tests/install);
#   2. real verbs: the same build's conformance, RPC and NFS interop suites over
#      Soft-RoCE (rxe0) in a qemu VM (scripts/rxe-vm), when this machine can
#      run it (x86_64, qemu installable, root to build the image once);
#      otherwise it says why and the summary says the stage was skipped.
#      It runs in the background, its output printed whole when it ends, its
#      failure failing the run;
#   3. ASan+UBSan build, shm-only (-Dverbs=disabled -Dmlx5=disabled
#      -Deal=disabled: no rdma-core, no DPDK, docs/install.md): the suites of
#      stage 1 (the install check with --no-rdma), and the fault soak's short
#      mode (tern-soak --ci). One build is both the sanitizer build and the
#      proof that Tern builds and works without rdma-core and DPDK; the
#      verbs, mlx5 and EAL tests it leaves out run in stage 1 and (verbs) 2;
#      it compiles what those suites run and nothing else (as stage 4 does:
#      scripts/suite-targets.py);
#   4. TSan build: the suites that run code on more than one thread (the
#      conformance and functional suites, and the unit tests that start
#      threads: tests/unit/meson.build lists them);
#   5. fuzzing (scripts/fuzz.sh): every libFuzzer target over its committed
#      corpus, then for TERN_FUZZ_SECONDS (default 30) each, one target per
#      core at a time.
# The builds of stages 3, 4 and 5 compile one after another in the
# background at nice 19 from the end of the debug build on, beside the debug
# suites, the VM and the earlier stages' suites (which leave a core idle
# about half of the time); each stage waits for its own build.
# Exits non-zero on the first failing stage. TERN_TEST_QUICK=1 runs stage 1
# only. TERN_TEST_VM=0 skips stage 2, =1 makes it mandatory (fails if the VM
# cannot run); the default runs it when it can. Each stage's wall time is
# printed at the end, also when one fails.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
SECONDS=0

# Each stage's wall time, printed at the end of the run (also when a stage
# fails: the table then ends with the failing stage), so that where CI's time
# goes is visible in every log (docs/testing.md "Where the time goes").
stage_names=() stage_secs=() cur_stage= cur_t0=
stage_close() {
  [[ -n $cur_stage ]] || return 0
  stage_names+=("$cur_stage") stage_secs+=($((SECONDS - cur_t0)))
  cur_stage=
}
stage() { stage_close; echo; echo "=== $*"; cur_stage="$*" cur_t0=$SECONDS; }
stage_times() {
  local rc=$? i
  local failed=$cur_stage
  vm_stop
  builder_stop
  stage_close
  echo
  echo "stage wall times (s):"
  for i in "${!stage_names[@]}"; do
    printf '  %5d  %s%s\n' "${stage_secs[$i]}" "${stage_names[$i]}" \
      "$([[ $rc != 0 && ${stage_names[$i]} == "$failed" ]] && echo '  <- FAILED')"
  done
  printf '  %5d  total\n' "$SECONDS"
  return "$rc"
}
trap stage_times EXIT

# The VM stage runs in the background while the sanitizer builds compile:
# its guest leaves host CPU unused while it waits (the kernel's NFS server,
# mounts, grace periods, device re-creation) and while a suite polls on one
# vCPU of two, and a compiler takes it (docs/testing.md "Where the time
# goes"; verbs-suites.sh prints the guest's busy and idle CPU). Its output goes to a file, printed
# whole when it ends; its exit status fails the run as before. On any exit
# before that (a failed build), it is stopped (rxe-vm kills its qemu on TERM)
# and the end of its output printed.
vm_pid= vm_log= vm_t0=
vm_stop() {
  [[ -n $vm_pid ]] || return 0
  echo "stopping the VM stage (pid $vm_pid); its output so far, the end:"
  kill -TERM "$vm_pid" 2>/dev/null || true
  wait "$vm_pid" 2>/dev/null || true
  tail -40 "$vm_log" || true
  rm -f "$vm_log"
  vm_pid=
}
# The sanitizer and fuzz builds: one background chain at nice 19 (ASan+UBSan,
# TSan, fuzz), started when the debug build ends. A nice-19 compiler takes
# only the CPU the stages in front leave: the debug suites and the sanitizer
# suites run ~1 core's worth on average of the 2 (their tests mostly run one
# at a time and many wait), the VM's guest leaves about half of its vCPUs
# idle (docs/testing.md "Where the time goes"). Each build's status and time
# go to $builder_dir/NAME.done, its output to NAME.log; build_wait NAME
# waits for it and fails the run with the end of its log if it failed. On
# any exit before the chain ends it is stopped (its own process group).
builder_pid= builder_dir=
builder_stop() {
  [[ -n $builder_pid ]] || return 0
  kill -TERM -- "-$builder_pid" 2>/dev/null || true
  wait "$builder_pid" 2>/dev/null || true
  rm -rf "$builder_dir"
  builder_pid=
}
builder_run() {  # builder_run NAME COMMAND...: in the chain, one build
  local name=$1 t0=$SECONDS rc=0
  shift
  "$@" >"$builder_dir/$name.log" 2>&1 || rc=$?
  echo "$rc $((SECONDS - t0))" >"$builder_dir/$name.done"
  return "$rc"
}
build_wait() {  # build_wait NAME "WHAT": waits for the chain's build NAME
  local name=$1 what=$2 rc secs
  stage "$what: waiting for its build (nice 19, beside the stages before)"
  while [[ ! -f $builder_dir/$name.done ]]; do
    if ! kill -0 "$builder_pid" 2>/dev/null; then
      echo "the background builds ended before the $what build" >&2
      tail -40 "$builder_dir"/*.log >&2 || true
      exit 1
    fi
    sleep 1
  done
  read -r rc secs <"$builder_dir/$name.done"
  # The table's line says how long the build took in all, beside what.
  cur_stage="$what: waiting for its build (it took $secs s in all, nice 19, beside the stages before)"
  if ((rc != 0)); then
    echo "the $what build FAILED (exit $rc); the end of its output:" >&2
    tail -60 "$builder_dir/$name.log" >&2
    exit "$rc"
  fi
}
jobs=$(nproc)
# The builds below are this script's own (a contributor's build/ is not
# touched): their libraries are compiled as unity blobs (-Dunity_libs=true,
# about 60% less compile time for them; meson.build). A name that two library
# files each define privately fails these builds: give it a name of its own,
# or share one definition.

stage "set-up (scripts/setup.sh: packages that are missing)"
"$top/scripts/setup.sh"
# The test builds link with lld (setup.sh installs it): 77 executables
# relinked in 14 s instead of 74 s (6.6 against 26.4 CPU s; docs/testing.md).
# Meson reads these when it sets a build directory up; fuzz.sh's clang too.
export CC_LD=lld CXX_LD=lld
# Debug information: line tables only (-g1). A sanitizer's report, a
# TERN_ASSERT backtrace and gdb's `bt` need no more than file:line; full -g
# (types, variables) cost ~23-30% more compiler time at -O2 and 8-15% at
# -O0 with a sanitizer (docs/testing.md). A contributor's build/ keeps -g.
g1=(-Dc_args=-g1 -Dcpp_args=-g1)
# The test files take gtest and the common standard headers from one
# precompiled header per build directory (-Dtest_pch=true, tests/test_pch.h:
# ~12% less compiler CPU on the test files, docs/testing.md). ccache caches
# a compile that uses one only with this sloppiness (it hashes the .gch
# itself; the build rebuilds the .gch when the flags change).
CCACHE_SLOPPINESS=$(ccache -k sloppiness 2>/dev/null || true)
export CCACHE_SLOPPINESS=${CCACHE_SLOPPINESS:+$CCACHE_SLOPPINESS,}pch_defines,time_macros

stage "debug build (build-test/)"
scripts/build.sh build-test -Dbuildtype=debugoptimized -Dbenchmarks=true -Dunity_libs=true -Dtest_pch=true "${g1[@]}"

# A sanitizer build compiles what its suites run and nothing else
# (scripts/suite-targets.py: each test's programs, and what is installed for
# the install check): the measurement programs run by hand (tern-churn, the
# *-measure tools), the C API's header-check objects and the example's
# smoke test outside TSan's suites are compiled and linked by the debug build
# only. `meson test --no-rebuild` runs what was built.
suite_build() {  # suite_build DIR "SUITE..." MESON-OPTION...
  local dir=$1 suites=$2 targets
  shift 2
  # Configure (or apply the options) only: build.ninja is ninja's own
  # regeneration target.
  scripts/build.sh "$dir" "$@" -- build.ninja
  # shellcheck disable=SC2086 # the suites are words
  targets=$(scripts/suite-targets.py "$dir" $suites)
  # shellcheck disable=SC2086 # one target a line
  scripts/build.sh "$dir" -- $targets
}
if [[ "${TERN_TEST_QUICK:-0}" != 1 ]]; then
  builder_dir=$(mktemp -d /tmp/tern-test-builds.XXXXXX)
  # Its own process group (set -m), so that builder_stop ends its compilers too.
  set -m
  (
    renice -n 19 -p "$BASHPID" >/dev/null
    builder_run asan suite_build build-asan "unit conformance functional apps soak" -Dbuildtype=debug \
      -Db_sanitize=address,undefined -Db_lundef=false -Dunity_libs=true -Dbenchmarks=false -Dapps=true \
      -Dverbs=disabled -Dmlx5=disabled -Deal=disabled -Dvm_tests=false -Dtest_pch=true "${g1[@]}"
    builder_run tsan suite_build build-tsan "unit conformance functional" -Dbuildtype=debug -Db_sanitize=thread \
      -Db_lundef=false -Dunity_libs=true -Dbenchmarks=false -Dapps=false -Dvm_tests=false -Dtest_pch=true "${g1[@]}"
    builder_run fuzz scripts/fuzz.sh --build-only
  ) </dev/null &
  builder_pid=$!
  set +m
fi

stage "debug: unit, conformance, functional and apps suites"
meson test -C build-test --no-rebuild --print-errorlogs --num-processes "$jobs" --suite unit --suite conformance --suite functional --suite apps

if [[ "${TERN_TEST_QUICK:-0}" == 1 ]]; then
  echo "TERN_TEST_QUICK=1: VM, sanitizer and fuzzing stages not run"
  exit 0
fi

stage "real verbs: rxe0 in a qemu VM (build-test/ binaries): its start"
vm_note=
if [[ "${TERN_TEST_VM:-auto}" == 0 ]]; then
  vm_note="VM stage SKIPPED (TERN_TEST_VM=0)"
elif why=$(scripts/rxe-vm/rxe-vm check); then
  echo "$why"
  vm_log=$(mktemp /tmp/tern-test-vm.XXXXXX)
  vm_t0=$SECONDS
  scripts/rxe-vm/rxe-vm run --timeout 1800 -- tests/vm/verbs-suites.sh build-test >"$vm_log" 2>&1 &
  vm_pid=$!
  echo "its output follows when it ends (the sanitizer builds compile meanwhile, nice 19)"
elif [[ "${TERN_TEST_VM:-auto}" == 1 ]]; then
  echo "$why (TERN_TEST_VM=1: the VM stage is required)" >&2
  exit 1
else
  vm_note="VM stage SKIPPED, real-verbs tests NOT run: ${why#rxe-vm: }"
fi
[[ -z $vm_note ]] || echo "$vm_note"

if [[ -n $vm_pid ]]; then
  stage "real verbs: waiting for the VM"
  vm_rc=0
  wait "$vm_pid" || vm_rc=$?
  vm_pid=
  cat "$vm_log"
  rm -f "$vm_log"
  # The table's line for this wait says how long the VM ran in all (from its
  # start, the builds' time included).
  cur_stage="real verbs: waiting for the VM (it ran $((SECONDS - vm_t0)) s in all, builds beside it)"
  ((vm_rc == 0)) || exit "$vm_rc"
  # rpcrdma-torture's CI selection ran against the kernel's svcrdma and
  # tern-nfsd in that boot (tests/vm/verbs-suites.sh): the difference table,
  # failing on a difference docs/conformance.md does not write down.
  stage "rpcrdma-torture: svcrdma and tern-nfsd, the differences"
  scripts/conformance-table.py build-test/conformance-vm/kernel.json build-test/conformance-vm/tern.json \
    --names svcrdma,tern-nfsd --known docs/conformance.md
fi

# The suites run after the VM, without it beside them, as before; the
# builds still to come compile beside them at nice 19.
build_wait asan "ASan+UBSan, shm-only (build-asan/): no rdma-core, no DPDK"
stage "ASan+UBSan: unit, conformance, functional and apps suites"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  meson test -C build-asan --no-rebuild --print-errorlogs --num-processes "$jobs" --suite unit --suite conformance --suite functional --suite apps
# The fault soak's short mode (tern-soak --ci, docs/reliability.md): about two minutes.
stage "ASan+UBSan: the fault soak (tern-soak --ci)"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  meson test -C build-asan --no-rebuild --print-errorlogs --suite soak

build_wait tsan "TSan (build-tsan/)"
stage "TSan: unit (threaded), conformance and functional suites"
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions="$top/tests/tsan.supp" \
  meson test -C build-tsan --no-rebuild --print-errorlogs --num-processes "$jobs" --suite unit --suite conformance --suite functional

build_wait fuzz "fuzzing (build-fuzz/)"
stage "fuzzing (build-fuzz/, scripts/fuzz.sh: its build done, the targets run)"
scripts/fuzz.sh

echo
if [[ -n $vm_note ]]; then
  echo "all test stages run passed; $vm_note"
else
  echo "all test stages passed"
fi
