#!/usr/bin/env bash
# tern-nfs-read's command line, without an NFS server: bad values are usage
# errors (exit 2, one line and the usage line), and --server's address and
# port reach the device spec intact (the connect then fails: no RDMA device,
# or nothing at that address; the error names the spec).
set -euo pipefail
nfs=$1
fail() { echo "FAIL: $*" >&2; exit 1; }

# Each of these was accepted: --qd 8x as 8, --timeout abc and 0 as 0 ms.
for bad in "--qd 8x" "--qd 0" "--qd 65" "--timeout abc" "--timeout 0" "--timeout -1" "--size 1x" \
           "--server [::1 " "--server host:0" "--server host:99999" "--bogus"; do
  set +e
  # shellcheck disable=SC2086
  msg=$("$nfs" --server 192.0.2.1 --path /x $bad 2>&1 >/dev/null)
  rc=$?
  set -e
  [[ $rc == 2 ]] || fail "'$bad' exited $rc: $msg"
  (($(wc -l <<<"$msg") <= 2)) || fail "'$bad' printed $(wc -l <<<"$msg") lines: $msg"
  grep -q "^usage: tern-nfs-read" <<<"$msg" || fail "'$bad': no usage line: $msg"
done

# --busy-poll is a flag (no value): accepted, and the run goes on to connect.
set +e
msg=$(timeout 60 "$nfs" --server 192.0.2.1 --path /x --timeout 1 --busy-poll 2>&1 >/dev/null)
rc=$?
set -e
[[ $rc == 1 ]] || fail "--busy-poll exited $rc (expected a connect error): $msg"

# --json to a path that cannot be written: said before connecting.
set +e
msg=$("$nfs" --server 192.0.2.1 --path /x --json /nonexistent-dir/x.json 2>&1)
rc=$?
set -e
[[ $rc == 2 ]] && grep -q "cannot write /nonexistent-dir/x.json" <<<"$msg" || fail "--json bad path: $rc $msg"

spec_of() {  # spec_of ARGS...: the device spec the connect error names
  set +e
  local msg
  msg=$(timeout 60 "$nfs" --path /x --timeout 1 "$@" 2>&1 >/dev/null)
  local rc=$?
  set -e
  [[ $rc == 1 ]] || fail "$*: exited $rc (expected a connect error): $msg"
  sed -n 's/.*cannot connect to \([^ ]*\) (\([^)]*\)).*/\1 \2/p' <<<"$msg"
}
# IPv6 in brackets with a port (it was split at the last colon: addr=[::1]),
# a bare IPv6 address (it became addr=fe80:, port 1), IPv4 with a port.
[[ $(spec_of --server '[::1]:2050') == "[::1]:2050 verbs:addr=::1,port=2050" ]] ||
  fail "[::1]:2050 -> $(spec_of --server '[::1]:2050')"
[[ $(spec_of --server 'fe80::1') == "[fe80::1]:20049 verbs:addr=fe80::1,port=20049" ]] ||
  fail "fe80::1 -> $(spec_of --server 'fe80::1')"
[[ $(spec_of --server '[fe80::2]') == "[fe80::2]:20049 verbs:addr=fe80::2,port=20049" ]] ||
  fail "[fe80::2] -> $(spec_of --server '[fe80::2]')"
[[ $(spec_of --server 192.0.2.1:2049 --dev rxe0) == "192.0.2.1:2049 verbs:dev=rxe0,addr=192.0.2.1,port=2049" ]] ||
  fail "192.0.2.1:2049 -> $(spec_of --server 192.0.2.1:2049 --dev rxe0)"
# --dev as a device spec, as in tern-perf.
[[ $(spec_of --server 192.0.2.1 --dev verbs:dev=rxe0,mw=off) == "192.0.2.1:20049 verbs:dev=rxe0,mw=off,addr=192.0.2.1,port=20049" ]] ||
  fail "--dev spec -> $(spec_of --server 192.0.2.1 --dev verbs:dev=rxe0,mw=off)"
echo "nfs-read args: ok"
