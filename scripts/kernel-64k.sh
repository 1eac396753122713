#!/usr/bin/env bash
# The arm64 kernel with 64 KiB base pages (PMD 512 MiB): Debian's Linux 7.3
# or 6.12 source (apt's linux-source-7.3, linux-source-6.12) cross-built for
# arm64 from allnoconfig and the fragment kernel/arm64-64k.config
# (scripts/kconfig/merge_config.sh -n), everything built in, no modules;
# Debian ships no such kernel. The kernel
# matrix boots it as a --kernel cell (qemu-system-aarch64 -M virt -cpu max):
#
#   scripts/kernel-64k.sh [--version 7.3|6.12] [--rebuild] [--jobs N]
#   scripts/kernel-matrix.sh --kernel 7.x-arm64-64k=$(scripts/kernel-64k.sh) \
#     --cell 7.x-arm64-64k:xfs --thp always
#
#   --version V  the source: 7.3 (default) or 6.12
#   --rebuild    run make even when the cached Image is up to date
#   --jobs N     make -jN (default: the number of CPUs); make runs under nice -n 19
#
# Prints the path of the Image (target/kernel-lab/src-arm64-64k/arch/arm64/
# boot/Image for 7.3, src-arm64-64k-6.12/... for 6.12) on standard output.
# Caches (target/kernel-lab/): the source package (cache/, fetched as
# scripts/kernel-lab.sh does), the built tree; a build whose source and
# resolved configuration did not change is skipped. Build times go to
# build-times.jsonl (variant arm64-64k or arm64-64k-6.12).
# Exit status: 0 when the Image is built or up to date, 2 for bad usage, a
# missing tool, or a failed configuration or build (one line says which).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

die() { echo "kernel-64k: $*" >&2; exit 2; }
say() { echo "kernel-64k: $*" >&2; }

rebuild=0
version=7.3
jobs=$(nproc)
while [ $# -gt 0 ]; do
  case $1 in
    --rebuild) rebuild=1 ;;
    --version) shift; case ${1:-} in 7.3|6.12) version=$1 ;; *) die "--version takes 7.3 or 6.12" ;; esac ;;
    --jobs) shift; [[ ${1:-} =~ ^[1-9][0-9]*$ ]] || die "--jobs needs a positive number"; jobs=$1 ;;
    -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  shift
done

export ARCH=arm64 CROSS_COMPILE=aarch64-linux-gnu-
for t in make aarch64-linux-gnu-gcc aarch64-linux-gnu-ld flex bison bc perl tar xz dpkg-deb apt-get nice sha256sum; do
  command -v "$t" > /dev/null 2>&1 || die "'$t' not found: run scripts/install-deps.sh"
done
frag=$repo/kernel/arm64-64k.config
[ -s "$frag" ] || die "no configuration fragment kernel/arm64-64k.config"

lab=$repo/target/kernel-lab
cache=$lab/cache
variant=arm64-64k
[ "$version" = 7.3 ] || variant=arm64-64k-$version
tree=$lab/src-$variant
image=$tree/arch/arm64/boot/Image
mkdir -p "$cache"
# The private apt configuration shared with scripts/kernel-lab.sh and
# scripts/kernel-matrix.sh (trixie-backports has linux-source-7.3).
aptd=$repo/target/vm/apt
# shellcheck source=scripts/lib/debian-apt.sh
. scripts/lib/debian-apt.sh
# shellcheck source=scripts/lib/linux-source.sh
. scripts/lib/linux-source.sh

# What the guest cannot do without (tests/vm/README.md): a configuration
# that lost one of these (a renamed or unmet dependency) is refused.
required=(ARM64_64K_PAGES SMP TRANSPARENT_HUGEPAGE TRANSPARENT_HUGEPAGE_ALWAYS ANON_VMA_NAME
  PROC_PAGE_MONITOR SYSCTL DEVTMPFS_MOUNT TMPFS BLK_DEV_INITRD RD_GZIP BINFMT_ELF BINFMT_SCRIPT
  EXT4_FS XFS_FS BLK_DEV_LOOP PCI_HOST_GENERIC VIRTIO_PCI VIRTIO_MMIO VIRTIO_BLK
  SERIAL_AMBA_PL011_CONSOLE ARM_GIC ARM_GIC_V3 NET UNIX INET PERF_EVENTS KALLSYMS)

# allnoconfig + the fragment; .config is replaced only when it changed, so
# that an unchanged configuration never makes make rebuild anything.
configure() {
  local why
  why=$(
    set -e
    cd "$tree"
    [ -f .config ] && cp -p .config .config.k64-old
    # A failed configuration leaves the last good one (and make's view of it).
    trap 'if [ -f .config.k64-old ]; then mv .config.k64-old .config; fi' EXIT
    scripts/kconfig/merge_config.sh -n "$frag" > .merge.log 2>&1 ||
      { echo "merge_config.sh failed: $(grep -m 1 -iE 'error|\*\*\*' .merge.log || tail -n 1 .merge.log)"; exit 1; }
    # A value the fragment asks for and kconfig did not give.
    if grep -q 'not in final .config' .merge.log; then
      echo "kconfig did not keep $(grep -m 1 'Requested value:' .merge.log | sed 's/.*Requested value: *//') (see ${tree#"$repo"/}/.merge.log)"
      exit 1
    fi
    # Unchanged: the old file, with its time, stays.
    if [ -f .config.k64-old ] && cmp -s .config .config.k64-old; then
      mv .config.k64-old .config
    fi
    for o in "${required[@]}"; do
      grep -q "^CONFIG_$o=y" .config || { echo "CONFIG_$o is not built in"; exit 1; }
    done
    rm -f .config.k64-old
  ) || die "configuring ${tree#"$repo"/} failed: $why"
}

tb=$(source_tarball "$version")
t0=$(date +%s)
kind="make after a change"
[ -s "$tree/.k64-built" ] || kind="clean build"
if [ "$(cat "$tree/.k64-source" 2> /dev/null)" != "$(basename "$tb")" ]; then
  say "unpacking $(basename "$tb") into ${tree#"$repo"/}"
  unpack "$tb" "$tree"
  basename "$tb" > "$tree/.k64-source"
  kind="clean build"
fi
configure
key=$( { basename "$tb"; grep -v '^#' "$tree/.config"; } | sha256sum | cut -c1-16)
if [ $rebuild = 0 ] && [ "$(cat "$tree/.k64-built" 2> /dev/null)" = "$key" ] && [ -s "$image" ]; then
  say "up to date (${image#"$repo"/})"
  echo "$image"
  exit 0
fi
log=$lab/build-$variant.log
say "building Image (nice -n 19 make -j$jobs; $kind), log: ${log#"$repo"/}"
(cd "$tree" && nice -n 19 make -j"$jobs" Image > "$log" 2>&1) ||
  die "building the arm64 64 KiB-page kernel failed: $(first_error "$log") (see ${log#"$repo"/})"
secs=$(( $(date +%s) - t0 ))
echo "$key" > "$tree/.k64-built"
echo "{\"variant\":\"$variant\",\"kind\":\"$kind\",\"seconds\":$secs,\"date\":\"$(date -u +%FT%TZ)\",\"jobs\":$jobs}" >> "$lab/build-times.jsonl"
say "built in $secs s: ${image#"$repo"/} ($(stat -c %s "$image") bytes)"
echo "$image"
