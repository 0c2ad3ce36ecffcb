#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks to build and test Tern.
# Idempotent: when every package is present it only runs dpkg-query (well under a second).
#   scripts/setup.sh [--fuzz]
# --fuzz adds what scripts/fuzz.sh needs (clang and its libFuzzer and
# sanitizer runtimes); the plain setup stays without them.
set -euo pipefail

packages=(
  build-essential g++ pkg-config meson ninja-build
  lld  # the test builds link with it (scripts/test.sh): about 3x less link CPU than ld.bfd
  libdpdk-dev libnuma-dev libbsd-dev
  libibverbs-dev librdmacm-dev rdma-core ibverbs-providers
  libgtest-dev libbenchmark-dev
  liburing-dev  # tern-nfsd's storage path (io_uring); without it a worker pool
  python3
  # Observability tests: tshark decodes driver packet captures (pcap=), and
  # dpdk-dev ships dpdk-telemetry.py, which reads Tern's rte_telemetry commands.
  tshark dpdk-dev
  # The Prometheus exposition test parses /metrics with the reference client's parser.
  python3-prometheus-client
  gnuplot-nox  # tern-perf --plot (optional at run time; installed so its test runs)
  e2fsprogs  # mkfs.ext4: nfsd_crash_durability's loop-device export
)
fuzz_packages=(clang libclang-rt-14-dev)
for a in "$@"; do
  case $a in
    --fuzz) packages+=("${fuzz_packages[@]}") ;;
    *) echo "tern setup: unknown option $a" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  exit 0
fi

echo "tern setup: installing ${missing[*]}" >&2
sudo_cmd=()
if [[ $(id -u) -ne 0 ]]; then
  command -v sudo >/dev/null || { echo "tern setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo_cmd=(sudo)
fi
export DEBIAN_FRONTEND=noninteractive
# wireshark-common asks whether non-root users may capture; Tern only reads
# capture files, so answer no without a prompt.
echo "wireshark-common wireshark-common/install-setuid boolean false" | "${sudo_cmd[@]}" debconf-set-selections
"${sudo_cmd[@]}" apt-get update -qq
"${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "tern setup: done" >&2
