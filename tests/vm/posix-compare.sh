#!/bin/bash
# A manual measurement, not part of CI (docs/nfs-gateway.md, "POSIX results
# next to the kernel's nfsd"): runs inside the rxe VM (scripts/rxe-vm) a
# POSIX syscall test suite laid out as pjdfstest's is -- a directory holding
# the built `pjdfstest` program and its tests/ tree of sh scripts that print
# TAP lines -- through the kernel's NFSv3/RDMA client, on a tern-nfsd mount
# and on a mount of the kernel's own nfsd, each server exporting a fresh
# tmpfs, in the same boot. Each test file runs on the kernel's server and
# then on tern-nfsd, as root, with its working directory a fresh directory
# on the mount; the TAP lines are counted per file and per test number.
#
# This script fetches and builds nothing: the suite is given by path, built
# beforehand by whoever runs it (CI cannot: it has no network but Debian's
# mirror, and the suite is not a Debian package).
#
#   scripts/rxe-vm/rxe-vm run --timeout 7200 -- \
#     tests/vm/posix-compare.sh BUILDDIR SUITEDIR OUTDIR [TEST...]
#
# DEADLINE=EPOCH_SECONDS: no file is started after it (what ran is counted).
# PARALLEL=1 (-e PARALLEL=1): each file runs on both servers at once.
# TEST is a directory under SUITEDIR/tests (chmod) or one file (chmod/00.t);
# none: all of them. OUTDIR (shared with the host) receives each run's output
# (OUTDIR/{knfsd,tern}/DIR_NN.out), results.txt (one line per file:
# name, ok and not-ok counts on each server, seconds) and diff.txt (every test
# number that passed on knfsd and not on tern-nfsd, and the reverse, with
# both servers' lines). Exit 0 when nothing passed on knfsd that did not
# pass on tern-nfsd.
set -uo pipefail
: "${PARALLEL:=0}"
build=$(cd "${1:?usage: posix-compare.sh BUILDDIR SUITEDIR OUTDIR [TEST...]}" && pwd)
suite=$(cd "${2:?SUITEDIR}" && pwd)
out=${3:?OUTDIR}
shift 3
addr=169.254.77.1
[[ -x $suite/pjdfstest && -d $suite/tests ]] || { echo "posix-compare: no $suite/pjdfstest or tests/" >&2; exit 2; }
mkdir -p "$out/knfsd" "$out/tern"
out=$(cd "$out" && pwd)
rm -f "$out"/knfsd/*.out "$out"/tern/*.out "$out"/knfsd/*.time "$out"/tern/*.time

# The suite names its files with `openssl md5`; the image has no openssl.
# Only the digest's last field is read, so md5sum's digest serves.
shim=/tmp/posix-compare-bin
mkdir -p $shim
printf '#!/bin/sh\n[ "$1" = md5 ] || exit 1\nmd5sum | { read -r h _; echo "MD5(stdin)= $h"; }\n' >$shim/openssl
chmod 755 $shim/openssl
export PATH=$shim:$PATH

# The servers: the kernel's (tmpfs /export, rdma 20049, no_root_squash) and
# tern-nfsd (tmpfs /srv/texport, rdma 20050, --no-root-squash). No NLM on
# tern-nfsd: both mounted nolock.
kernel-nfsd-start /export >/dev/null || exit 1
mkdir -p /srv/texport /mnt/knfsd /mnt/tern
mountpoint -q /srv/texport || mount -t tmpfs -o mode=0777 tmpfs /srv/texport
log=$out/tern-nfsd.log
"$build/apps/tern-nfsd" --no-rpcbind --nlm-port off --export /srv/texport --name /texport --addr $addr --port 20050 --mount-port 20048 \
  --no-root-squash --state-dir /var/lib/tern-nfsd-posix >"$log" 2>&1 &
srv=$!
for _ in $(seq 100); do (exec 3<>/dev/tcp/$addr/20048) 2>/dev/null && break; sleep 0.1; done
opts=vers=3,proto=rdma,nolock,hard
mount -t nfs -o "$opts,port=20049" $addr:/export /mnt/knfsd || exit 1
mount -t nfs -o "$opts,port=20050,mountport=20048,mountproto=tcp" $addr:/texport /mnt/tern || exit 1
grep ' nfs ' /proc/mounts >"$out/mounts.txt"

files=()
if (($# == 0)); then set -- $(cd "$suite/tests" && ls -d */ | tr -d /); fi
for t in "$@"; do
  if [[ -d $suite/tests/$t ]]; then
    for f in "$suite/tests/$t"/*.t; do files+=("$t/$(basename "$f")"); done
  else
    files+=("$t")
  fi
done

: >"$out/results.txt"
: >"$out/diff.txt"
count() { grep -cE "^$1 [0-9]+" "$2"; }
run_one() {  # run_one SERVER FILE NAME: the file's output in $out/SERVER/NAME.out, its seconds in NAME.time
  local s=$1 f=$2 name=$3 work=/mnt/$1/run.$3 t0 t1 rc
  rm -rf "$work"
  mkdir -p "$work"
  t0=$(date +%s.%N)
  (cd "$work" && timeout 900 sh "$suite/tests/$f") >"$out/$s/$name.out" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  ((rc == 124)) && echo "TIMEOUT" >>"$out/$s/$name.out"
  rm -rf "$work"
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1fs", b - a }' >"$out/$s/$name.time"
}
umask 022
for f in "${files[@]}"; do
  if [[ -n ${DEADLINE:-} ]] && (($(date +%s) >= DEADLINE)); then
    echo "posix-compare: DEADLINE reached; the files from $f on were not run" | tee -a "$out/results.txt"
    break
  fi
  name=${f%.t}
  name=${name//\//_}
  line="$f"
  # Both servers at once (the VM has two vCPUs), or one after the other.
  # (Waiting on these pids alone: a bare wait would wait for tern-nfsd.)
  pids=()
  for s in knfsd tern; do
    run_one $s "$f" "$name" &
    pids+=($!)
    ((PARALLEL)) || wait $!
  done
  wait "${pids[@]}"
  for s in knfsd tern; do
    line+=" $s ok=$(count ok "$out/$s/$name.out") notok=$(count 'not ok' "$out/$s/$name.out") $(cat "$out/$s/$name.time")"
  done
  echo "$line" | tee -a "$out/results.txt"
  # Per test number: "N ok" or "N notok" on each side.
  nums() { sed -nE 's/^ok ([0-9]+).*/\1 ok/p; s/^not ok ([0-9]+).*/\1 notok/p' "$1" | sort -n; }
  join -a1 -a2 -e missing -o 0,1.2,2.2 <(nums "$out/knfsd/$name.out" | sort -k1,1) \
    <(nums "$out/tern/$name.out" | sort -k1,1) | sort -n | while read -r n k t; do
    [[ $k == "$t" ]] && continue
    echo "$f $n knfsd=$k tern=$t"
    echo "    knfsd: $(grep -E "^(not )?ok $n( |$)" "$out/knfsd/$name.out" | head -1)"
    echo "    tern:  $(grep -E "^(not )?ok $n( |$)" "$out/tern/$name.out" | head -1)"
  done >>"$out/diff.txt"
done

umount /mnt/knfsd /mnt/tern
kill -TERM $srv
wait $srv
tot() { awk -v s="$1" -v k="$2" '{ for (i = 2; i <= NF; i++) if ($i == s) { split($(i + ((k == "ok") ? 1 : 2)), a, "="); n += a[2] } } END { print n + 0 }' "$out/results.txt"; }
clean() { awk -v s="$1" '{ for (i = 2; i <= NF; i++) if ($i == s && $(i + 2) == "notok=0") n++ } END { print n + 0 }' "$out/results.txt"; }
echo "posix-compare: $(grep -c " knfsd ok=" "$out/results.txt") of ${#files[@]} files run; knfsd $(tot knfsd ok) ok, $(tot knfsd notok) not ok, $(clean knfsd) files all ok;" \
  "tern-nfsd $(tot tern ok) ok, $(tot tern notok) not ok, $(clean tern) files all ok" | tee -a "$out/results.txt"
worse=$(grep -c 'knfsd=ok tern=' "$out/diff.txt")
echo "posix-compare: $worse tests pass on knfsd and not on tern-nfsd; $(grep -c 'tern=ok' "$out/diff.txt") the reverse (diff.txt)"
((worse == 0))
