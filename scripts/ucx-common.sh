# Sourced by compare-ucx.sh and compare-ucx-modes.sh: what both need to run
# UCX's perftest next to tern-perf on this host. Expects $top (the tree),
# $seconds, $out (the output folder), $S (tern-perf's shm socket path),
# $port (the last TCP port used), $r (the round) and $me (the script's name,
# for messages).

# Two CPUs, the build dependencies, ucx-utils (Debian's), a release build.
ucx_prepare() {
  [[ $(nproc) -ge 2 ]] || { echo "$me: needs two CPUs" >&2; exit 1; }
  "$top/scripts/setup.sh"
  if ! command -v ucx_perftest >/dev/null; then
    echo "$me: installing ucx-utils" >&2
    local sudo_=""
    [[ $(id -u) -ne 0 ]] && sudo_=sudo
    $sudo_ apt-get install -y -qq ucx-utils >/dev/null 2>&1 ||
      { $sudo_ apt-get update -qq && $sudo_ apt-get install -y -qq ucx-utils >/dev/null; }
  fi
  "$top/scripts/build.sh" build-perf -Dbuildtype=release -Dtests=false
  P="$top/build-perf/apps/tern-perf"
  CL="$top/build-perf/bench/tern-cacheline"
  NOISE="$top/build-perf/bench/tern-noise"
}

# ucx NAME TEST [VAR=value...] [ucx_perftest args...]: one ucx_perftest run
# of $iters iterations, client on CPU 0 and server on CPU 1; its final -f
# line goes to $out/NAME.$r (empty when it failed three times).
ucx() {
  local name=$1 test=$2 sp line a try
  shift 2
  local envs=() args=()
  for a in "$@"; do
    if [[ $a == *=* ]]; then envs+=("$a"); else args+=("$a"); fi
  done
  line=""
  # On a loaded machine the server may not listen yet when the client starts
  # (the client then fails at once, and the server would wait for ever): up
  # to three tries, each with a fresh server, which is killed if no client
  # came.
  for try in 1 2 3; do
    port=$((port + 1))
    env "${envs[@]}" ucx_perftest -c 1 -t "$test" -s 32 -n "$iters" -p "$port" "${args[@]}" >"$out/$name.$r.srv" 2>&1 &
    sp=$!
    for _ in $(seq 50); do ss -ltn 2>/dev/null | grep -q ":$port " && break; sleep 0.1; done
    if line=$(env "${envs[@]}" timeout 60 ucx_perftest 127.0.0.1 -c 0 -t "$test" -s 32 -n "$iters" -p "$port" \
      "${args[@]}" -f 2>&1 | tail -1) && [[ -n $line ]]; then
      wait "$sp" 2>/dev/null || true
      break
    fi
    kill "$sp" 2>/dev/null || true
    wait "$sp" 2>/dev/null || true
    echo "$me: ucx_perftest $test failed (try $try): $line" >&2
    line=""
  done
  echo "$line" >"$out/$name.$r"
}

# tern NAME "SERVER ARGS" "CLIENT ARGS": one tern-perf run over shm for
# $seconds, client on lcore 0 and server on lcore 1 -> $out/NAME.$r.json.
tern() {
  local name=$1 sargs=$2 cargs=$3 sp
  rm -f "$S"
  # shellcheck disable=SC2086
  "$P" server $sargs --dev "shm:path=$S" --lcore 1 --once --quiet &
  sp=$!
  for _ in $(seq 100); do [[ -S $S ]] && break; sleep 0.02; done
  # shellcheck disable=SC2086
  "$P" client $cargs --dev "shm:path=$S" --lcore 0 --seconds "$seconds" --quiet --json "$out/$name.$r.json" \
    >/dev/null 2>&1 || echo "$me: tern-perf $name failed" >&2
  wait "$sp" 2>/dev/null || true
}
