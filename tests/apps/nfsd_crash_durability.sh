#!/usr/bin/env bash
# Durability before the reply, checked across a simulated power cut (issue
# 22). nfsd_durability.sh kills tern-nfsd with SIGKILL, which cannot tell
# the page cache from the disk: a server that answered FILE_SYNC with the
# data still in memory would pass it. Here the export is a small ext4 on a
# loop device, and after the replies the file system itself is cut off:
#
#   1. tern-nfsd (over pmd/shm, one storage backend per round) is sent, by
#      nfsd-probe: FILE_SYNC WRITEs, DATA_SYNC WRITEs, UNSTABLE WRITEs
#      followed by a COMMIT, and UNSTABLE WRITEs never committed; every
#      reply is checked.
#   2. SIGKILL to tern-nfsd; the file system is shut down with no log flush
#      (fs-shutdown: dirty pages and the unflushed journal are dropped, as
#      a power cut drops them), unmounted, mounted again (journal replay).
#   3. A new tern-nfsd on it; nfsd-probe reads every stable range back
#      through NFS and compares it byte for byte.
#
# Self-check, so that the test cannot pass by simulating nothing: data that
# was only ever in the page cache must be gone after step 2 -- the
# uncommitted UNSTABLE WRITEs, and a file this script writes into the
# mounted file system without any sync. If either survived, the "crash"
# lost nothing and says nothing about fsync; the round is tried again (a
# sync(2) by some other process on the machine in that second would flush
# it), and after three such rounds the test fails.
#
# Rounds: the io_uring backend, the worker-thread backend (both with the
# group commit, the default), io_uring with --group-commit off (RWF_SYNC and
# COMMIT's own fsync) and --storage sync. TERN_CRASH_ROUNDS="NAME ..."
# runs only those (e.g. to see one backend fail with its sync broken).
#
# Needs root, a loop device and mkfs.ext4 (e2fsprogs, scripts/setup.sh):
# without them it says why and exits 77, which meson reports as SKIP
# (never as a pass).
set -euo pipefail
nfsd=$1
probe=$2
shutdown_fs=$3
fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "nfsd_crash_durability: SKIP: $*"; exit 77; }

[[ $(id -u) == 0 ]] || skip "needs root (loop devices, mount, open_by_handle_at)"
[[ -e /dev/loop-control ]] || skip "no /dev/loop-control"
for t in losetup mkfs.ext4 mount umount; do
  command -v "$t" >/dev/null || skip "no $t"
done

# The image lives in memory when it can: its loop device's flushes are
# then free, and the test stays well under a second per round.
base=/dev/shm
[[ -d $base && -w $base ]] || base=/var/tmp
dir=$(mktemp -d "$base/tern-crash.XXXXXX")
img=$dir/ext4.img
mnt=$dir/mnt
dev=
srv=
cleanup() {
  set +e  # every step, whatever the one before did
  [[ -n $srv ]] && { kill -KILL "$srv"; wait "$srv"; } 2>/dev/null
  if mountpoint -q "$mnt" 2>/dev/null; then
    for _ in $(seq 50); do umount "$mnt" 2>/dev/null && break; sleep 0.1; done
  fi
  [[ -n $dev ]] && losetup -d "$dev" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
mkdir "$mnt" "$dir/state"
truncate -s 64M "$img"
mkfs.ext4 -q -F "$img" || fail "mkfs.ext4 $img"
dev=$(losetup -f --show "$img" 2>/dev/null) || skip "losetup: no loop device could be attached"
mount -t ext4 "$dev" "$mnt" || skip "mount of an ext4 loop device failed"
umount "$mnt"
printf '%s localhost(rw,no_root_squash)\n' "$mnt/export" >"$dir/exports"

# umount, waiting out the references a killed process's io_uring workers
# may hold for a moment after its death: a lazy unmount would keep the
# superblock (shut down) alive, and the next mount would get it back.
unmount() {
  for _ in $(seq 100); do
    umount "$mnt" 2>/dev/null && return 0
    sleep 0.1
  done
  fail "umount $mnt: $(umount "$mnt" 2>&1)"
}

start() {  # start LOG ARGS...: tern-nfsd; sets $srv, $mport, $log
  log=$dir/$1.log
  shift
  "$nfsd" --exports "$dir/exports" --listen "shm:path=$dir/s" --state-dir "$dir/state" \
    --mount-port 0 --mount-addr 127.0.0.1 "$@" >"$log" 2>&1 &
  srv=$!
  for _ in $(seq 100); do
    grep -qs "tern-nfsd: serving" "$log" && break
    kill -0 "$srv" 2>/dev/null || fail "tern-nfsd exited: $(cat "$log")"
    sleep 0.1
  done
  mport=$(sed -n 's/.*MOUNT tcp 127.0.0.1:\([0-9]*\);.*/\1/p' "$log")
  [[ -n $mport ]] || fail "no MOUNT port: $(cat "$log")"
}

# The stats line tern-nfsd prints on SIGUSR1 (the counters so far).
stats() {
  local before
  before=$(grep -c 'stats: ' "$log" || true)
  kill -USR1 "$srv"
  for _ in $(seq 100); do
    (($(grep -c 'stats: ' "$log" || true) > before)) && break
    sleep 0.05
  done
  grep 'stats: ' "$log" | tail -1
}

# The writes of a round: "FILE OFFSET COUNT SEED HOW". Offsets not on page
# boundaries, files grown by the writes (the size must survive as well),
# one range rewritten by a later seed.
writes=(
  "fsync 0 16384 11 file"
  "fsync 20000 9000 12 file"
  "fsync 4096 4096 13 file"
  "dsync 0 12288 21 data"
  "dsync 30000 5000 22 data"
  "commit 0 8192 31 unstable"
  "commit 8192 8192 32 unstable"
  "commit 50001 3000 33 unstable"
)
# What must read back after the crash: "FILE OFFSET COUNT SEED" (fsync's
# [4096, 8192) is seed 13's, which rewrote it; [16384, 20000) is a hole).
expect=(
  "fsync 0 4096 11" "fsync 4096 4096 13" "fsync 8192 8192 11" "fsync 20000 9000 12"
  "dsync 0 12288 21" "dsync 30000 5000 22"
  "commit 0 8192 31" "commit 8192 8192 32" "commit 50001 3000 33"
)
lost_write="lost 0 8192 41 unstable"  # never committed: must be gone

round() {  # round NAME TERN-NFSD-ARGS...: 0 ok, 3 the crash lost nothing (retry)
  local name=$1 out root i st f
  shift
  # (set -e does not hold in a function called with ||: every step checks.)
  mount -t ext4 "$dev" "$mnt" || fail "$name: mount"
  rm -rf "$mnt/export" || fail "$name: rm"
  mkdir "$mnt/export" || fail "$name: mkdir"
  for f in fsync dsync commit lost pagecache; do
    : >"$mnt/export/$f" || fail "$name: create $f"
  done
  sync -f "$mnt/export" || fail "$name: sync"  # the empty files exist on the device; their data is the server's job
  start "$name-1" "$@"

  out=$(printf 'mnt 127.0.0.1 %s %s\n' "$mport" "$mnt/export" | timeout 30 "$probe")
  root=$(awk '{print $3}' <<<"$out")
  [[ $root != - && -n $root ]] || fail "$name: MNT: $out"
  # One probe run: lookups, then the writes and the COMMIT, in this order.
  local script="connect shm:path=$dir/s"$'\n'
  for f in fsync dsync commit lost; do script+="lookup $root $f"$'\n'; done
  out=$(printf '%s' "$script" | timeout 30 "$probe")
  local -a lk
  mapfile -t lk < <(grep '^lookup ' <<<"$out")
  declare -A fh
  i=0
  for f in fsync dsync commit lost; do
    read -r _ st fh[$f] <<<"${lk[$i]:-lookup -1 -}"
    [[ $st == 0 ]] || fail "$name: LOOKUP $f: $out"
    i=$((i + 1))
  done
  script="connect shm:path=$dir/s"$'\n'
  local w file off n seed how
  for w in "${writes[@]}" "$lost_write"; do
    read -r file off n seed how <<<"$w"
    script+="pwrite ${fh[$file]} $off $n $seed $how"$'\n'
  done
  script+="commit ${fh[commit]}"$'\n'
  out=$(printf '%s' "$script" | timeout 60 "$probe")
  # Every reply: status 0; a stable WRITE says it is at least as stable as
  # asked; the COMMIT's verifier is the UNSTABLE WRITEs' (no restart between).
  local line committed verf wverf=
  i=0
  while read -r line; do
    [[ $line == connect* ]] && { [[ $line == "connect ok" ]] || fail "$name: $line"; continue; }
    if [[ $line == pwrite* ]]; then
      read -r _ st committed verf <<<"$line"
      read -r file off n seed how <<<"${writes[$i]:-$lost_write}"
      [[ $st == 0 ]] || fail "$name: WRITE $how $file@$off: '$line'"
      case $how in
        file) [[ $committed == 2 ]] || fail "$name: FILE_SYNC WRITE answered as committed=$committed" ;;
        data) ((committed >= 1)) || fail "$name: DATA_SYNC WRITE answered as committed=$committed" ;;
        unstable) [[ $file != commit ]] || wverf=$verf ;;
      esac
      i=$((i + 1))
    elif [[ $line == commit* ]]; then
      read -r _ st verf <<<"$line"
      [[ $st == 0 ]] || fail "$name: COMMIT: '$line'"
      [[ $verf == "$wverf" ]] || fail "$name: COMMIT verifier $verf, the WRITEs' $wverf"
    fi
  done <<<"$out"
  ((i == ${#writes[@]} + 1)) || fail "$name: $i WRITE replies of $((${#writes[@]} + 1)): $out"
  # The harness's own control: written into the page cache, never synced.
  head -c 8192 /dev/urandom >"$mnt/export/pagecache" || fail "$name: pagecache"
  local st_line
  st_line=$(stats)
  grep -q " storage=$expect_backend " <<<"$st_line" || fail "$name: not the $expect_backend backend: $st_line"

  # The crash: nothing of tern-nfsd survives, nor anything the file system
  # held only in memory.
  kill -KILL "$srv"
  wait "$srv" 2>/dev/null || true
  srv=
  "$shutdown_fs" "$mnt" || fail "$name: the file system could not be shut down"
  unmount
  mount -t ext4 "$dev" "$mnt" || fail "$name: mount after the crash: $(dmesg 2>/dev/null | tail -3)"

  # Self-check first: if unsynced data survived, this round proved nothing.
  local lost_size pc_size
  lost_size=$(stat -c %s "$mnt/export/lost")
  pc_size=$(stat -c %s "$mnt/export/pagecache")
  if ((lost_size != 0 || pc_size != 0)); then
    echo "$name: data never synced survived the simulated crash (lost: $lost_size bytes," \
      "pagecache: $pc_size bytes): not a crash; again" >&2
    unmount
    return 3
  fi

  start "$name-2" "$@"
  out=$(printf 'mnt 127.0.0.1 %s %s\n' "$mport" "$mnt/export" | timeout 30 "$probe")
  root=$(awk '{print $3}' <<<"$out")
  [[ $root != - && -n $root ]] || fail "$name: MNT after the crash: $out"
  script="connect shm:path=$dir/s"$'\n'
  for f in fsync dsync commit; do script+="lookup $root $f"$'\n'; done
  out=$(printf '%s' "$script" | timeout 30 "$probe")
  mapfile -t lk < <(grep '^lookup ' <<<"$out")
  i=0
  for f in fsync dsync commit; do
    [[ ${lk[$i]:-} == "lookup 0 ${fh[$f]}" ]] ||
      fail "$name: LOOKUP $f after the crash: '${lk[$i]:-}' (the handle before: ${fh[$f]})"
    i=$((i + 1))
  done
  script="connect shm:path=$dir/s"$'\n'
  local e
  for e in "${expect[@]}"; do
    read -r file off n seed <<<"$e"
    script+="pread ${fh[$file]} $off $n $seed"$'\n'
  done
  out=$(printf '%s' "$script" | timeout 60 "$probe")
  i=0
  while read -r line; do
    [[ $line == pread* ]] || continue
    read -r file off n seed <<<"${expect[$i]}"
    [[ $line == "pread 0 same" ]] ||
      fail "$name: after a crash, the acknowledged data of $file [$off, +$n) (seed $seed) reads back as '$line'" \
        "(the reply came before the data was durable)"
    i=$((i + 1))
  done <<<"$out"
  ((i == ${#expect[@]})) || fail "$name: $i READ checks of ${#expect[@]}: $out"
  kill -TERM "$srv"
  wait "$srv" || fail "$name: SIGTERM: exit $?"
  srv=
  unmount
  echo "$name: ${#writes[@]} acknowledged WRITEs + COMMIT survived; the uncommitted and unsynced data did not"
}

check() {  # check NAME BACKEND ARGS...: a round, tried again when the crash lost nothing
  local name=$1
  [[ -z ${TERN_CRASH_ROUNDS:-} || " $TERN_CRASH_ROUNDS " == *" $name "* ]] || return 0
  expect_backend=$2
  shift 2
  local rc
  for _ in 1 2 3; do
    rc=0
    round "$name" "$@" || rc=$?
    ((rc == 0)) && return 0
    ((rc == 3)) || fail "$name: round failed ($rc)"
  done
  fail "$name: in 3 rounds the simulated crash lost data that was never synced: it is not simulating a crash"
}

check io_uring io_uring --storage uring
check threads threads --storage threads
check io_uring-no-group-commit io_uring --storage uring --group-commit off
check sync sync --storage sync
echo "nfsd_crash_durability: ok"
