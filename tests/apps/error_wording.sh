#!/usr/bin/env bash
# Error lines that read naturally (issue 24), checked word for word on the
# real programs: a failure with a system errno is named by that errno
# ("address in use", "permission denied"), not by the Errc the code acts on
# ("bad state: ... Address already in use", "invalid argument: ...
# permission denied"), and the program's name is said once
# ("tern-nfsd: invalid argument: tern-nfsd: ..." before).
#   error_wording.sh TERN_PERF TERN_NFSD
set -uo pipefail
perf=$1
nfsd=$2
# shellcheck source=tests/apps/lib.sh
. "$(dirname "$0")/lib.sh"
scratch error-wording
chmod 755 "$dir"
mkdir "$dir/exp" "$dir/ro"
# tern-nfsd's log lines: "<UTC time> tern error tern-nfsd: MESSAGE".
ts='^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+Z tern error '

# expect WHAT WANT-LINE (exact, or an ERE with ~) OUTPUT: the last line of OUTPUT.
expect() {
  local what=$1 want=$2 out=$3 last
  last=$(tail -n 1 <<<"$out")
  if [[ $want == ~* ]]; then
    [[ $last =~ ${want#\~} ]] || fail "$what: got: $last; want: ${want#\~}"
  else
    [[ $last == "$want" ]] || fail "$what: got: $last; want: $want"
  fi
  # No program name twice on a line, whatever the wording.
  for p in tern-nfsd tern-perf; do
    (($(grep -o "$p:" <<<"$last" | wc -l) <= 1)) || fail "$what: $p named twice: $last"
  done
  echo "ok: $what: $last"
}

# A TCP port held by another process (the kernel picks a free one).
python3 -c '
import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen()
open(sys.argv[1], "w").write(str(s.getsockname()[1]))
time.sleep(120)' "$dir/port" &
for _ in $(seq 100); do [[ -s $dir/port ]] && break; sleep 0.05; done
port=$(cat "$dir/port") || fail "no port held"

out=$(timeout 20 "$perf" server --rpc --dev "shm:path=$dir/p.sock" --metrics "$port" 2>&1)
expect "tern-perf --metrics on a port in use" \
  "tern-perf: address in use: metrics: cannot listen on 127.0.0.1:$port (EADDRINUSE)" "$out"

out=$(timeout 20 "$nfsd" --export "$dir/exp" --listen "shm:path=$dir/n1.sock" --state-dir "$dir/st1" \
  --metrics "$port" 2>&1)
expect "tern-nfsd --metrics on a port in use" \
  "~${ts}tern-nfsd: address in use: metrics: cannot listen on 127\.0\.0\.1:$port \(EADDRINUSE\)$" "$out"

out=$(timeout 20 "$nfsd" --export "$dir/exp" --listen "shm:path=$dir/n2.sock" --state-dir "$dir/st2" \
  --mount-port "$port" 2>&1)
expect "tern-nfsd --mount-port on a port in use" \
  "~${ts}tern-nfsd: address in use: MOUNT: cannot listen on tcp 127\.0\.0\.1 port $port \(EADDRINUSE\)$" "$out"

# Permission: a directory this user cannot write. Root may write anywhere,
# so as root the programs run as nobody (setpriv); without a way to drop
# privileges these cases are skipped, said so.
chmod 555 "$dir/ro"
uid=$(id -u)
run=()
if ((uid == 0)); then
  if setpriv --reuid=nobody --regid=nogroup --clear-groups true 2>/dev/null &&
     setpriv --reuid=nobody --regid=nogroup --clear-groups test -x "$perf"; then
    run=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
    uid=$(id -u nobody)
  else
    echo "error wording: ok (permission cases skipped: cannot run the programs as nobody)"
    exit 0
  fi
fi
chmod 777 "$dir"  # nobody makes its state directories here

out=$(timeout 20 "${run[@]}" "$perf" server --dev "shm:path=$dir/ro/s" 2>&1)
expect "tern-perf server on a socket path it cannot create" \
  "tern-perf server: permission denied: shm: cannot create $dir/ro/s (its directory is not writable by uid $uid) (EACCES)" \
  "$out"

out=$(timeout 20 "${run[@]}" "$nfsd" --export "$dir/exp" --listen "shm:path=$dir/n3.sock" --state-dir "$dir/st3" \
  --pidfile "$dir/ro/tern-nfsd.pid" 2>&1)
expect "tern-nfsd --pidfile it cannot create" \
  "~${ts}tern-nfsd: permission denied: cannot open $dir/ro/tern-nfsd\.pid \(EACCES\)$" "$out"

out=$(timeout 20 "${run[@]}" "$nfsd" --export "$dir/exp" --listen "shm:path=$dir/n4.sock" --state-dir "$dir/ro/st" 2>&1)
expect "tern-nfsd --state-dir it cannot create" \
  "~${ts}tern-nfsd: permission denied: cannot create $dir/ro/st \(EACCES\)$" "$out"

echo "$dir/exp" >"$dir/exports"
chmod 600 "$dir/exports"
out=$(timeout 20 "${run[@]}" "$nfsd" --exports "$dir/exports" --listen "shm:path=$dir/n5.sock" --state-dir "$dir/st5" 2>&1)
expect "tern-nfsd --exports it cannot read" \
  "~${ts}tern-nfsd: permission denied: cannot read the exports file $dir/exports \(EACCES\)$" "$out"
echo "error wording: ok"
