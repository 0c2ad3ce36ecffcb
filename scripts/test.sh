#!/usr/bin/env bash
# Installs what is missing, builds, and runs every Tern test:
#   1. debug-checked build (TERN_ASSERT on): unit, conformance and app tests
#      (the app suite installs the build and links programs against it with
#      pkg-config alone: tests/install);
#   2. real verbs: the same build's conformance, RPC and NFS interop suites over
#      Soft-RoCE (rxe0) in a qemu VM (scripts/rxe-vm), when this machine can
#      run it (x86_64, qemu installable, root to build the image once);
#      otherwise it says why and the summary says the stage was skipped.
#      It runs in the background while the builds of stages 3 and 4 compile
#      (nice 19), its output printed whole when it ends, its failure failing
#      the run;
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

stage "debug build (build-test/)"
scripts/build.sh build-test -Dbuildtype=debugoptimized -Dbenchmarks=true -Dunity_libs=true "${g1[@]}"
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
  echo "its output follows when it ends (the sanitizer builds compile meanwhile)"
elif [[ "${TERN_TEST_VM:-auto}" == 1 ]]; then
  echo "$why (TERN_TEST_VM=1: the VM stage is required)" >&2
  exit 1
else
  vm_note="VM stage SKIPPED, real-verbs tests NOT run: ${why#rxe-vm: }"
fi
[[ -z $vm_note ]] || echo "$vm_note"

# Both sanitizer builds compile while the VM runs, niced: the VM's timed
# steps (soaks, the 256-connection scale step) get the CPU they ask for, the
# compilers what they leave. Their suites run after the VM, each on an
# otherwise idle machine as before.
beside=${vm_pid:+ (nice 19, beside the VM)}
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
  ${vm_pid:+nice -n 19} scripts/build.sh "$dir" "$@" -- build.ninja
  # shellcheck disable=SC2086 # the suites are words
  targets=$(scripts/suite-targets.py "$dir" $suites)
  # shellcheck disable=SC2086 # one target a line
  ${vm_pid:+nice -n 19} scripts/build.sh "$dir" -- $targets
}
stage "ASan+UBSan build, shm-only (build-asan/): no rdma-core, no DPDK$beside"
suite_build build-asan "unit conformance functional apps soak" -Dbuildtype=debug -Db_sanitize=address,undefined \
  -Db_lundef=false -Dunity_libs=true -Dbenchmarks=false -Dapps=true -Dverbs=disabled -Dmlx5=disabled -Deal=disabled \
  -Dvm_tests=false "${g1[@]}"
stage "TSan build (build-tsan/)$beside"
suite_build build-tsan "unit conformance functional" -Dbuildtype=debug -Db_sanitize=thread -Db_lundef=false \
  -Dunity_libs=true -Dbenchmarks=false -Dapps=false -Dvm_tests=false "${g1[@]}"
if [[ -n $vm_pid ]]; then
  stage "real verbs: waiting for the VM"
  vm_rc=0
  wait "$vm_pid" || vm_rc=$?
  vm_pid=
  cat "$vm_log"
  rm -f "$vm_log"
  # The table's line for this wait says how long the VM ran in all (from its
  # start, the builds' time included).
  cur_stage="real verbs: waiting for the VM (it ran $((SECONDS - vm_t0)) s in all, the builds beside it)"
  ((vm_rc == 0)) || exit "$vm_rc"
  # rpcrdma-torture's CI selection ran against the kernel's svcrdma and
  # tern-nfsd in that boot (tests/vm/verbs-suites.sh): the difference table,
  # failing on a difference docs/conformance.md does not write down.
  stage "rpcrdma-torture: svcrdma and tern-nfsd, the differences"
  scripts/conformance-table.py build-test/conformance-vm/kernel.json build-test/conformance-vm/tern.json \
    --names svcrdma,tern-nfsd --known docs/conformance.md
fi

stage "ASan+UBSan: unit, conformance, functional and apps suites"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  meson test -C build-asan --no-rebuild --print-errorlogs --num-processes "$jobs" --suite unit --suite conformance --suite functional --suite apps
# The fault soak's short mode (tern-soak --ci, docs/reliability.md): about two minutes.
stage "ASan+UBSan: the fault soak (tern-soak --ci)"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  meson test -C build-asan --no-rebuild --print-errorlogs --suite soak

stage "TSan: unit (threaded), conformance and functional suites"
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions="$top/tests/tsan.supp" \
  meson test -C build-tsan --no-rebuild --print-errorlogs --num-processes "$jobs" --suite unit --suite conformance --suite functional

stage "fuzzing (build-fuzz/, scripts/fuzz.sh)"
scripts/fuzz.sh

echo
if [[ -n $vm_note ]]; then
  echo "all test stages run passed; $vm_note"
else
  echo "all test stages passed"
fi
