#!/usr/bin/env bash
# Builds the rxe-vm image into a cache directory (called by `rxe-vm build`; needs root).
#   build-image.sh CACHEDIR          rebuild what is stale (needs root)
#   build-image.sh --check CACHEDIR  exit 0 when the image is up to date, 1 when not (any user)
#
# Cache contents: vmlinux, initrd.img, base.size, base.stamp, overlay.stamp, kernel, kernel.memo.
# Two layers, each with a stamp (a sha256 of its inputs):
#   base    = vmlinux + a cpio of the Debian kernel (its vmlinuz decompressed to the ELF vmlinux,
#             booted through the PVH entry) and a debootstrap'd bookworm userland holding the
#             RDMA/NFS modules (signatures stripped) and the packages below.
#             Inputs: the kernel package name+version, this file (package and module lists).
#   overlay = a small cpio of /init and the helpers in guest/. Inputs: those files.
# initrd.img = base cpio + overlay cpio concatenated (the kernel unpacks both); base.size marks
# where the overlay starts, so a change to /init only replaces the tail. Kept uncompressed:
# decompressing in the guest costs more under TCG than reading the raw cpio.
#
# The Debian mirror is read at build time from the host's apt sources; it is not kept in the
# image (sources, lists, logs and caches are removed).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
check_only=0
if [[ ${1:-} == --check ]]; then check_only=1; shift; fi
cache=${1:?usage: build-image.sh [--check] CACHEDIR}

# Guest userland. rdma-core & co. for verbs, perftest for reference numbers, the kernel NFS
# server tools for the interop tests, fio for the NFS gateway's tests and figures
# (tests/vm/nfs-gateway.sh), and the shared libraries host-built Tern binaries link
# (libstdc++/libgcc are in minbase; sanitizer runtimes for the ASan/UBSan/TSan build trees).
guest_packages=(
  rdma-core ibverbs-providers ibverbs-utils rdmacm-utils perftest
  iproute2 kmod procps
  nfs-kernel-server nfs-common fio
  libibverbs1 librdmacm1 libnuma1 libbsd0
  libasan8 libubsan1 libtsan2 libbenchmark1debian
)
# Kernel modules (with their dependencies, resolved by modprobe against the package's tree).
# brd, ext4 and device-mapper's delay and flakey targets (dm-error is in dm_mod) give
# tern-nfsd's tests a slow or failing device under an export (tests/vm/nfs-slow-storage.sh,
# nfs-device-error.sh); they are loaded by those tests, not by /init.
# Optional ones (crc32 providers for rxe's ICRC) are copied when the kernel has them as modules.
guest_modules=(
  virtio_pci virtio_console 9pnet_virtio 9p
  rdma_rxe ib_uverbs rdma_ucm rpcrdma
  nfsd nfs nfsv3 nfsv4
  dummy veth
  brd ext4 dm_delay dm_flakey
)
optional_modules=(crc32_generic crc32-pclmul crc32c_generic crc32c-intel)

log() { echo "rxe-vm build: $*" >&2; }
die() { echo "rxe-vm build: error: $*" >&2; exit 1; }


# --- inputs and stamps -------------------------------------------------------------------
kernel_pkg() {
  # The package linux-image-amd64 depends on, e.g. "linux-image-6.1.0-56-amd64 6.1.192-2".
  # apt-cache takes ~1 s here (no pkgcache.bin): the answer is memoized per state of apt's lists.
  local sig memo_sig memo_pkg
  sig=$(stat -c '%n %Y %s' /var/lib/apt/lists/*_Packages* 2>/dev/null | sha256sum | cut -c1-32)
  if read -r memo_sig memo_pkg 2>/dev/null <"$cache/kernel.memo" && [[ $memo_sig == "$sig" ]]; then
    echo "$memo_pkg"
    return
  fi
  local pkg
  pkg=$(apt-cache show --no-all-versions linux-image-amd64 2>/dev/null |
    sed -n 's/^Depends:.*\(linux-image-[0-9][^ ,]*\) (= \([^)]*\)).*/\1 \2/p' | head -n1)
  [[ -n $pkg ]] && { echo "$sig $pkg" >"$cache/kernel.memo"; } 2>/dev/null
  echo "$pkg"
}
mkdir -p "$cache" 2>/dev/null || true
kpkg=$(kernel_pkg)
if ((check_only)) && [[ -z $kpkg ]]; then
  kpkg=$(cat "$cache/kernel" 2>/dev/null) || true  # apt lists gone: trust the cached kernel
  [[ -n $kpkg ]] || exit 1
fi
if [[ -z $kpkg ]]; then
  log "apt has no linux-image-amd64; running apt-get update"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  kpkg=$(kernel_pkg)
fi
[[ -n $kpkg ]] || die "cannot find the package linux-image-amd64 depends on (apt-cache show linux-image-amd64)"
kname=${kpkg% *}
kver=${kname#linux-image-}

# This file minus comments and blank lines: editing a comment does not rebuild the image.
base_stamp=$({ printf '%s\n' "$kpkg" "$(uname -m)"; grep -Ev '^[[:space:]]*(#|$)' "$here/build-image.sh"; } |
  sha256sum | cut -d' ' -f1)
overlay_stamp=$(cd "$here" && cat init guest/* | sha256sum | cut -d' ' -f1)

base_fresh() {
  [[ $(cat "$cache/base.stamp" 2>/dev/null) == "$base_stamp" && -f $cache/vmlinux &&
     -f $cache/initrd.img && -s $cache/base.size ]] &&
    (($(stat -c %s "$cache/initrd.img") >= $(<"$cache/base.size")))
}
overlay_fresh() { [[ $(cat "$cache/overlay.stamp" 2>/dev/null) == "$overlay_stamp" ]]; }
if ((check_only)); then
  base_fresh && overlay_fresh
  exit
fi
[[ $(id -u) -eq 0 ]] || die "building the image needs root (debootstrap, chroot, device nodes)"
mkdir -p "$cache"

# --- mirror --------------------------------------------------------------------------------
# First URI of a stanza/line whose suite is the plain release (not -security/-updates).
read_mirror() {
  local f=/etc/apt/sources.list.d/debian.sources
  if [[ -r $f ]]; then
    awk 'BEGIN{RS=""; FS="\n"}
         { uri=""; suites=""; types="";
           for (i=1;i<=NF;i++) {
             if ($i ~ /^URIs:/)   { sub(/^URIs:[ \t]*/,"",$i);   split($i,a,/[ \t]+/); uri=a[1] }
             if ($i ~ /^Suites:/) { sub(/^Suites:[ \t]*/,"",$i); suites=" " $i " " }
             if ($i ~ /^Types:/)  { types=$i }
           }
           if (types ~ /deb([ \t]|$)/ && suites ~ / bookworm / && uri != "") { print uri; exit }
         }' "$f"
    return
  fi
  local g
  for g in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [[ -r $g ]] || continue
    awk '$1=="deb" { i=2; if ($2 ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
                     if ($(i+1)=="bookworm") { print $i; exit } }' "$g"
  done | head -n1
}

# --- kernel: vmlinux + modules ---------------------------------------------------------------
# Finds a compressed stream in a bzImage and decompresses it to the ELF vmlinux
# (the technique of the kernel's scripts/extract-vmlinux).
extract_vmlinux() {
  local img=$1 out=$2 i magic tool off
  # Magic numbers without NUL bytes (bash strings cannot hold them).
  local -a magics=($'\xfd7zXZ' $'(\xb5/\xfd' $'\x1f\x8b\x08' $'\x02\x21\x4c\x18' 'BZh')
  local -a tools=('xz -dcq' 'zstd -dcq' 'gzip -dcq' 'lz4 -dcq' 'bzip2 -dcq')
  for i in "${!magics[@]}"; do
    magic=${magics[i]}; tool=${tools[i]}
    command -v "${tool%% *}" >/dev/null || continue
    for off in $(LC_ALL=C grep -aboF -- "$magic" "$img" | cut -d: -f1); do
      tail -c "+$((off + 1))" "$img" | $tool >"$out" 2>/dev/null || true
      if [[ $(head -c4 "$out" | od -An -c | tr -d ' ') == '177ELF' ]]; then return 0; fi
    done
  done
  return 1
}

# Removes the appended module signature: ... [sig][struct module_signature: 12 bytes, sig_len
# big-endian in the last 4]["~Module signature appended~\n": 28 bytes].
strip_signature() {
  local f=$1 size siglen
  size=$(stat -c %s "$f")
  ((size > 40)) || return 0
  [[ $(tail -c 28 "$f") == "~Module signature appended~" ]] || return 0  # $(...) drops the \n
  siglen=$(tail -c 32 "$f" | head -c 4 | od -An -tu1 | awk '{print $1*16777216+$2*65536+$3*256+$4}')
  truncate -s $((size - 40 - siglen)) "$f"
}

build_base() {
  local work=$1 mirror
  mirror=$(read_mirror)
  [[ -n $mirror ]] || die "no Debian mirror for bookworm in /etc/apt/sources.list.d/debian.sources or sources.list"

  log "kernel: $kpkg"
  mkdir -p "$work/kpkg"
  (cd "$work" && apt-get download -q -o APT::Sandbox::User=root "$kname=${kpkg#* }" >/dev/null) || die "apt-get download $kname failed"
  dpkg -x "$work"/"${kname}"_*.deb "$work/kpkg"
  extract_vmlinux "$work/kpkg/boot/vmlinuz-$kver" "$work/vmlinux" ||
    die "could not decompress vmlinuz-$kver to an ELF vmlinux"

  log "debootstrap bookworm (minbase + ${#guest_packages[@]} packages)"
  local root=$work/root
  local inc
  inc=$(IFS=,; echo "${guest_packages[*]}")
  if ! debootstrap --variant=minbase --include="$inc" bookworm "$root" "$mirror" >"$work/debootstrap.log" 2>&1; then
    tail -n 30 "$work/debootstrap.log" >&2
    [[ -f $root/debootstrap/debootstrap.log ]] && tail -n 30 "$root/debootstrap/debootstrap.log" >&2
    die "debootstrap failed (log above)"
  fi

  log "modules"
  local kmods=$work/kpkg/lib/modules/$kver
  [[ -d $kmods ]] || kmods=$work/kpkg/usr/lib/modules/$kver
  [[ -d $kmods ]] || die "no modules in $kname"
  local kbase=${kmods%/lib/modules/*}
  depmod -b "$kbase" "$kver"
  local -a wanted=("${guest_modules[@]}")
  local m
  for m in "${optional_modules[@]}"; do
    modprobe -d "$kbase" -S "$kver" --show-depends "$m" >/dev/null 2>&1 && wanted+=("$m")
  done
  local -a paths=()
  local deps
  for m in "${wanted[@]}"; do
    deps=$(modprobe -d "$kbase" -S "$kver" --show-depends "$m") || die "module $m not found in $kname"
    paths+=($(awk '$1=="insmod" {print $2}' <<<"$deps"))
  done
  local dst=$root/lib/modules/$kver n=0 path rel
  mkdir -p "$dst"
  while read -r path; do
    rel=${path#"$kmods"/}
    mkdir -p "$dst/$(dirname "$rel")"
    case $path in
      *.ko.xz)  xz -dc "$path" >"$dst/${rel%.xz}" ;;
      *.ko.zst) zstd -dcq "$path" >"$dst/${rel%.zst}" ;;
      *)        cp "$path" "$dst/$rel" ;;
    esac
    n=$((n + 1))
  done < <(printf '%s\n' "${paths[@]}" | sort -u)
  find "$dst" -name '*.ko' -print0 | while IFS= read -r -d '' f; do strip_signature "$f"; done
  cp "$kmods"/modules.builtin* "$kmods"/modules.order "$dst/" 2>/dev/null || true
  depmod -b "$root" "$kver"
  log "$n modules (signatures stripped)"

  # Trim: no mirror, lists, caches, logs, docs, locales, udev hwdb in the image.
  rm -rf "$root"/etc/apt/sources.list "$root"/etc/apt/sources.list.d/* \
         "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/var/cache/debconf/*-old \
         "$root"/var/log/* "$root"/debootstrap \
         "$root"/usr/share/doc/* "$root"/usr/share/man/* "$root"/usr/share/info/* \
         "$root"/usr/share/locale/* "$root"/usr/share/lintian "$root"/usr/lib/udev/hwdb.bin \
         "$root"/usr/lib/udev/hwdb.d "$root"/etc/udev/hwdb.bin
  # python3 (pulled in by nfs-common for nfsiostat/mountstats) and iconv's gconv modules are not
  # needed by anything run in the VM; they are 1/5 of the initrd, which the guest unpacks at boot.
  rm -rf "$root"/usr/lib/python3* "$root"/usr/bin/python3* "$root"/usr/lib/x86_64-linux-gnu/gconv
  local host=${mirror#*://}; host=${host%%/*}
  local left
  left=$(grep -rIl -- "$host" "$root/etc" "$root/var" 2>/dev/null | head -n3 || true)
  [[ -z $left ]] || die "the mirror name ($host) is still in the image: ${left//$'\n'/ }"


  # Identity and networking defaults the guest expects.
  echo rxevm >"$root/etc/hostname"
  printf '127.0.0.1\tlocalhost\n169.254.77.1\trxevm-rdma rxevm\n::1\tlocalhost ip6-localhost\n' >"$root/etc/hosts"
  : >"$root/etc/fstab"
  echo "$kpkg" >"$root/etc/rxe-vm-kernel"

  log "packing base.cpio"
  (cd "$root" && find . -mindepth 1 | LC_ALL=C sort |
     cpio -o -H newc --quiet) >"$work/base.cpio"
  rm -rf "$root"
}

build_overlay() {
  local out=$1 stage
  stage=$(mktemp -d "$cache/overlay.XXXXXX")
  install -m 0755 "$here/init" "$stage/init"
  mkdir -p "$stage/usr/local/sbin"
  local f
  for f in "$here"/guest/*; do install -m 0755 "$f" "$stage/usr/local/sbin/"; done
  (cd "$stage" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) >"$out"
  rm -rf "$stage"
}

# --- main ----------------------------------------------------------------------------------------
exec {lockfd}>"$cache/build.lock"
flock "$lockfd"

if ! base_fresh; then
  work=$(mktemp -d "$cache/work.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  build_base "$work"
  build_overlay "$work/overlay.cpio"
  stat -c %s "$work/base.cpio" >"$work/base.size"
  cat "$work/overlay.cpio" >>"$work/base.cpio"
  rm -f "$cache/base.stamp"
  mv -f "$work/vmlinux" "$cache/vmlinux"
  mv -f "$work/base.cpio" "$cache/initrd.img"
  mv -f "$work/base.size" "$cache/base.size"
  echo "$kpkg" >"$cache/kernel"
  echo "$overlay_stamp" >"$cache/overlay.stamp"
  echo "$base_stamp" >"$cache/base.stamp"
  rm -rf "$work"
  trap - EXIT
  log "image ready: $cache ($(du -sh "$cache" | cut -f1), kernel $kver)"
elif ! overlay_fresh; then
  # Only /init or guest/* changed: replace the overlay at the end of the initrd (a copy, so a
  # VM starting meanwhile never reads a half-written file).
  build_overlay "$cache/overlay.cpio.new"
  cp "$cache/initrd.img" "$cache/initrd.img.new"
  truncate -s "$(<"$cache/base.size")" "$cache/initrd.img.new"
  cat "$cache/overlay.cpio.new" >>"$cache/initrd.img.new"
  mv -f "$cache/initrd.img.new" "$cache/initrd.img"
  rm -f "$cache/overlay.cpio.new"
  echo "$overlay_stamp" >"$cache/overlay.stamp"
  log "/init and helpers re-packed"
else
  log "image up to date: $cache (kernel $kver)"
fi
