#!/bin/bash
# Runs inside the rxe VM (scripts/rxe-vm), from tests/vm/verbs-suites.sh: an
# error from the device under a tern-nfsd export reaches the client whose
# READ hit it, as NFS3ERR_IO (EIO at the kernel client), and no one else.
#
# An ext4 file system on a RAM disk (brd) behind a device-mapper device that
# maps it linearly; two files, "bad" and "good". The table is then swapped
# (the file system stays mounted) for one whose range under bad's data
# blocks is dm's error target, and the caches are dropped. Through the
# kernel's NFS/RDMA client on tern-nfsd (one engine, so both readers share
# its storage queue): a reader of good loops over it with O_DIRECT the whole
# time while another process reads bad. Checks: bad's read fails with EIO;
# every read of good succeeded with the right bytes, during and after;
# tern-nfsd counted a failed storage operation and is still serving.
# Exit status 0 only if every check passed; a summary at the end.
#   tests/vm/nfs-device-error.sh BUILDDIR
set -uo pipefail
build=$(cd "${1:?usage: nfs-device-error.sh BUILDDIR}" && pwd)
# No udev in the VM: dmsetup makes the /dev/mapper nodes itself.
export DM_DISABLE_UDEV=1
addr=169.254.77.1 port=20050 mport=20048
fs=/srv/tern-deverr mnt=/mnt/tern-deverr state=/var/lib/tern-nfsd-deverr log=/tmp/tern-nfsd-deverr.log
work=/tmp/deverr
declare -a summary=()
fails=0
say() { echo "nfs-device-error: $*"; }
check() {  # check NAME COMMAND...
  local name=$1
  shift
  if "$@"; then summary+=("ok      $name"); else summary+=("FAILED  $name"); fails=$((fails + 1)); fi
}
setup_fail() { say "set-up failed: $*"; exit 1; }

modprobe brd rd_nr=1 rd_size=65536 || setup_fail "modprobe brd"
modprobe ext4 || setup_fail "modprobe ext4"
modprobe dm_mod || setup_fail "modprobe dm_mod"
sectors=$(blockdev --getsz /dev/ram0)
dmsetup create deverr --table "0 $sectors linear /dev/ram0 0" || setup_fail "dmsetup create"
mkfs.ext4 -q -F -b 4096 -E nodiscard /dev/mapper/deverr || setup_fail mkfs
mkdir -p "$fs" "$mnt" "$work"
mount -t ext4 /dev/mapper/deverr "$fs" || setup_fail "mount ext4"
chmod 0777 "$fs"
head -c 1M /dev/urandom >"$work/good"
head -c 1M /dev/urandom >"$fs/bad"
cp "$work/good" "$fs/good"
sync

# bad's data blocks (one extent, in file system blocks of 4 KiB: 8 sectors).
read -r first count < <(filefrag -e -b4096 "$fs/bad" | awk -F'[:. ]+' '/^ *0:/ { print $5, $7; exit }')
[[ $first =~ ^[0-9]+$ && $count =~ ^[0-9]+$ ]] || setup_fail "no extent for bad: $(filefrag -e -b4096 "$fs/bad")"
es=$((first * 8)) en=$((count * 8))
say "bad's data: blocks $first..$((first + count - 1)) (sectors $es+$en) now fail with EIO"
dmsetup suspend deverr || setup_fail "dmsetup suspend"
dmsetup reload deverr --table "0 $es linear /dev/ram0 0
$es $en error
$((es + en)) $((sectors - es - en)) linear /dev/ram0 $((es + en))" || setup_fail "dmsetup reload"
dmsetup resume deverr || setup_fail "dmsetup resume"
sync
echo 3 >/proc/sys/vm/drop_caches

"$build/apps/tern-nfsd" --no-rpcbind --nlm-port off --export "$fs" --name /export --addr $addr --port $port \
  --mount-port $mport --no-root-squash --engines 1 --state-dir "$state" >"$log" 2>&1 &
srv=$!
for _ in $(seq 100); do (exec 3<>/dev/tcp/$addr/$mport) 2>/dev/null && break; sleep 0.1; done
mount -t nfs -o "vers=3,proto=rdma,port=$port,mountport=$mport,mountproto=tcp,nolock,hard" $addr:/export "$mnt" ||
  setup_fail "mount: $(tail -3 "$log")"

# The other reader: good, over and over, O_DIRECT (each READ a device read
# only the first time; the point is that its calls keep being answered).
reader() {
  local i=0
  while [[ ! -e $work/stop ]]; do
    dd if="$mnt/good" of="$work/good.$i" bs=64k iflag=direct status=none || { echo "read $i failed" >"$work/reader.err"; return 1; }
    cmp -s "$work/good" "$work/good.$i" || { echo "read $i differs" >"$work/reader.err"; return 1; }
    rm -f "$work/good.$i"
    i=$((i + 1))
  done
  echo "$i" >"$work/reader.count"
}
rm -f "$work/stop" "$work/reader.err" "$work/reader.count"
reader &
rpid=$!
sleep 1
err=$(timeout 60 dd if="$mnt/bad" of=/dev/null bs=64k iflag=direct 2>&1)
rc=$?
say "reading bad: exit $rc: $err"
got_eio() { [[ $rc != 0 && $rc != 124 && $err == *'Input/output error'* ]]; }
check "a READ over the failing range gets EIO" got_eio
# The same range again, from the page cache's path (no O_DIRECT).
check "again, buffered: EIO" bash -c "! timeout 60 cat '$mnt/bad' >/dev/null 2>&1"
sleep 1
touch "$work/stop"
check "the other process's reads of good all succeeded, bytes right" wait "$rpid"
[[ -e $work/reader.err ]] && say "reader: $(cat "$work/reader.err")"
say "reads of good meanwhile: $(cat "$work/reader.count" 2>/dev/null || echo none)"
check "the other process read good more than once meanwhile" bash -c "[[ \$(cat '$work/reader.count' 2>/dev/null || echo 0) -ge 2 ]]"
check "after the error: good read again, a new file written and read back" \
  bash -c "echo 3 >/proc/sys/vm/drop_caches && cmp '$mnt/good' '$work/good' && echo fine >'$mnt/new' && [[ \$(cat '$mnt/new') == fine ]]"
kill -USR1 "$srv"
sleep 0.5
stats=$(grep 'tern-nfsd: stats:' "$log" | tail -1)
say "$stats"
failed=$(tr ' ' '\n' <<<"$stats" | sed -n 's/^storage_failed=//p')
check "tern-nfsd counted the failed storage operation (storage_failed=$failed)" bash -c "[[ '${failed:-0}' -ge 1 ]]"
check "tern-nfsd is still running" kill -0 "$srv"

umount "$mnt"
kill -TERM "$srv" 2>/dev/null
wait "$srv" 2>/dev/null
umount "$fs"
dmsetup remove deverr
rmmod brd 2>/dev/null
echo "--- nfs-device-error (EIO from the device under a tern-nfsd export):"
printf '    %s\n' "${summary[@]}"
((fails > 0)) && tail -20 "$log"
exit $((fails > 0))
