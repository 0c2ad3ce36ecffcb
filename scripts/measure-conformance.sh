#!/usr/bin/env bash
# rpcrdma-torture's catalogue against the Linux kernel's NFS/RDMA server
# (nfsd + svcrdma) and against tern-nfsd, in one boot of the Soft-RoCE VM
# (scripts/rxe-vm), and the difference table of the two runs
# (scripts/conformance-table.py): both pass, both fail, or they differ.
#
#   scripts/measure-conformance.sh [BUILDDIR] [--case GLOB] [--out DIR]
#
# BUILDDIR (default build) must hold apps/tern-nfsd and
# apps/torture/rpcrdma-torture. One VM at a time on a shared machine: run
# it under the machine's VM lock (flock /work/wt/vm.lock ...) when others
# share it. --out keeps the JSON and logs (default: a temporary folder).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
build=build cases='*' keep=
while (($#)); do
  case $1 in
    --case) cases=$2; shift 2 ;;
    --out) keep=$(realpath -m "$2"); shift 2 ;;
    -h | --help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "measure-conformance: unknown option $1" >&2; exit 2 ;;
    *) build=$1; shift ;;
  esac
done
for b in apps/tern-nfsd apps/torture/rpcrdma-torture; do
  [[ -x $build/$b ]] || { echo "measure-conformance: $build/$b is missing (build it first)" >&2; exit 2; }
done
out=$(mktemp -d "$top/.measure-conformance.XXXXXX")
trap 'rm -rf "$out"' EXIT
scripts/rxe-vm/rxe-vm run --timeout 1800 -e OUT="$out" -e NFSD="$build/apps/tern-nfsd" \
  -e TORTURE="$build/apps/torture/rpcrdma-torture" -e CASES="$cases" -- tests/vm/torture-compare.sh
if [[ -n $keep ]]; then mkdir -p "$keep" && cp -r "$out"/. "$keep"/; fi
for s in kernel tern; do tail -6 "$out/$s.txt" | sed "s/^/$s: /"; done
echo
scripts/conformance-table.py "$out/kernel.json" "$out/tern.json" --names svcrdma,tern-nfsd
