#!/usr/bin/env bash
# The kernel matrix: boot the distro kernels people run (Debian's cloud
# kernels, fetched with apt) in qemu and run hugetext's kernel-facing tests
# inside them, unmodified, on an ext4 and an xfs disk, under THP `always` and
# `madvise`; then probe what each route achieves there.
#
#   scripts/kernel-matrix.sh [--ci|--all|--arm64] [--cell KERNEL:FS]... [--thp always,madvise]
#                            [--timeout SECONDS] [--no-build] [--plan FILE] [--write-doc|--merge-doc]
#                            [--kernel NAME=BZIMAGE]... [--probe FILE] [--extra DIR]
#                            [--results DIR] [--append ARGS] [--pending FILE]
#                            [--retry-hung] [--count]
#
#   KERNEL   5.10, 6.1, 6.12 or 7.x (the newest linux-image-*-cloud-amd64 of that
#            series: Debian 11, 12, 12 security, 13 backports),
#            6.12-arm64 / 7.x-arm64 (the cloud-arm64 image: 4 KiB pages, 2 MiB
#            PMD) or 6.12-arm64-16k / 7.x-arm64-16k (the arm64-16k image: 16 KiB
#            pages, 32 MiB PMD), or a NAME given with --kernel. The suites are
#            in a private apt configuration under target/vm/apt (never the
#            system's sources list).
#   FS       ext4 or xfs
#   --all        every x86-64 cell: 5.10, 6.1, 6.12 and 7.x × ext4 and xfs
#   --arm64      every aarch64 cell: 6.12-arm64, 6.12-arm64-16k, 7.x-arm64 and
#                7.x-arm64-16k × ext4 and xfs (qemu-system-aarch64 -M virt, the
#                workspace cross-built for aarch64-unknown-linux-gnu)
#   --ci         CI's cells (tests/vm/README.md says why these): the x86-64
#                ones, then the aarch64 one, each run as its own harness run;
#                THP always (--thp chooses otherwise), a 1500 s timeout per
#                guest unless --timeout is given, and --retry-hung
#   (default)    CI's x86-64 cells, THP always and madvise
#   --plan FILE  the tests to run in the guests (default tests/vm/plan.txt)
#   --write-doc  regenerate doc/kernels.md and doc/kernels.json from the results
#   --merge-doc  put only the probes of these cells' results (a --probe run) into
#                doc/kernels.json's same cells, then regenerate doc/kernels.md; the
#                tests and other probes of those cells keep their last full run
#   --kernel NAME=BZIMAGE  boot this kernel (everything the guest needs built
#                in, no modules) in the cells NAME:FS (scripts/kernel-lab.sh); a NAME
#                with -arm64 in it (7.x-arm64-64k) is an arm64 Image, booted on
#                aarch64 (scripts/kernel-64k.sh)
#   --probe FILE the guest's probe script (default tests/vm/probe.sh)
#   --extra DIR  a directory of the repository to put on the guest disk too;
#                the libraries of its programs go into the guest root
#   --results DIR  where the cells' JSON go (default target/vm/results)
#   --append ARGS  more kernel command line
#   --pending FILE tests of the plan not to run, each with its reason
#                (SUITE TEST REASON...): reported "n/a" (needs=pending)
#   --retry-hung a cell whose guest hung (a watchdog's @@STUCK report, or
#                killed at the timeout) or whose kernel died before /init ran
#                is booted once more and must pass then; both runs are
#                reported, a failed test is never retried
#   --count      count guest instructions (TCG only): load the plugin
#                tests/vm/count/qcount.c into qemu, put its guest helper
#                target/vm/marker (and the readahead probe target/vm/rahead)
#                on the guest disk, run the counter's
#                self-check in each guest (a cell whose self-check fails
#                fails), and add the counts to the cell's JSON ("counts")
#                (QCOUNT_WATCH=0xADDR,... and QCOUNT_IRQ=0xADDR,... in the
#                environment: functions to count, interrupt entries whose
#                handlers to count apart; QCOUNT_SYMS=SYSTEM.MAP and
#                QCOUNT_SPLIT=LO-HI: those ids' kernel instructions by
#                function; tests/vm/README.md)
#
# One run boots the cells of one machine: x86-64 cells and aarch64 cells go
# in separate runs (each builds its own test binaries, fixtures and guest).
#
# Results go to target/vm/results/KERNEL-FS.json, console logs to
# target/vm/logs/. Exit status: 0 when every cell passed, 1 when a test failed
# or a guest did not finish, 2 for bad usage, a missing tool/package, or a
# harness step that failed before the guests could run (one line says which).
# See tests/vm/README.md for how the guest is built and why.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

die() { echo "kernel-matrix: $*" >&2; exit 2; }
say() { echo "kernel-matrix: $*" >&2; }
# A step that fails (set -e) stops the harness with one line and status 2,
# never with a status that reads as "a guest test failed".
trap 'st=$?; die "stopped at line $LINENO (status $st): $BASH_COMMAND"' ERR
orig_args=("$@")

# CI's cells, named here only (scripts/test.sh runs --ci): the x86-64 ones
# and the aarch64 one, under THP always; tests/vm/README.md says why.
ci_x86=(7.x:ext4 6.1:xfs)
ci_arm64=(7.x-arm64:xfs)
ci_thp=always
cells=()
thp=always,madvise
ci=0
thp_set=0
timeout_s=2400
timeout_set=0
retry_hung=0
build=1
write_doc=0
plan=tests/vm/plan.txt
probe=tests/vm/probe.sh
extra=
results=
append=
pending=
count=0
declare -A custom=()
while [ $# -gt 0 ]; do
  case $1 in
    --ci) ci=1 ;;
    --all) cells=(5.10:ext4 5.10:xfs 6.1:ext4 6.1:xfs 6.12:ext4 6.12:xfs 7.x:ext4 7.x:xfs) ;;
    --arm64) cells=(6.12-arm64:ext4 6.12-arm64:xfs 6.12-arm64-16k:ext4 6.12-arm64-16k:xfs
                    7.x-arm64:ext4 7.x-arm64:xfs 7.x-arm64-16k:ext4 7.x-arm64-16k:xfs) ;;
    --cell) shift; [ $# -gt 0 ] || die "--cell needs KERNEL:FS"; cells+=("$1") ;;
    --thp) shift; thp=${1:?--thp needs a list}; thp_set=1 ;;
    --timeout) shift; timeout_s=${1:?--timeout needs seconds}; timeout_set=1 ;;
    --retry-hung) retry_hung=1 ;;
    --count) count=1 ;;
    --no-build) build=0 ;;
    --plan) shift; plan=${1:?--plan needs a file} ;;
    --write-doc) write_doc=1 ;;
    --merge-doc) write_doc=2 ;;
    --kernel) shift; k=${1:-}; [[ $k == ?*=?* ]] || die "--kernel needs NAME=BZIMAGE"
      [ -f "${k#*=}" ] || die "no kernel image '${k#*=}'"
      custom[${k%%=*}]=$(readlink -f "${k#*=}") ;;
    --probe) shift; probe=${1:?--probe needs a file} ;;
    --extra) shift; extra=${1:?--extra needs a directory} ;;
    --results) shift; results=${1:?--results needs a directory} ;;
    --append) shift; append=${1?--append needs arguments} ;;
    --pending) shift; pending=${1:?--pending needs a file}; [ -f "$pending" ] || die "no file '$pending'" ;;
    -h|--help) sed -n '2,/^set -euo/{/^#/p}' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  shift
done
if [ $ci = 1 ]; then
  # Two harness runs (one per machine), the same other arguments; the status
  # is the worse of the two.
  [ ${#cells[@]} -eq 0 ] || die "--ci names its own cells (no --cell, --all or --arm64 with it)"
  [ $thp_set = 1 ] || thp=$ci_thp
  pass=()
  for a in "${orig_args[@]}"; do [ "$a" = --ci ] || pass+=("$a"); done
  pass+=(--retry-hung)
  [ $timeout_set = 1 ] || pass+=(--timeout 1500)
  st=0
  x=(); for c in "${ci_x86[@]}"; do x+=(--cell "$c"); done
  bash "$repo/scripts/kernel-matrix.sh" "${pass[@]}" --thp "$thp" "${x[@]}" || st=$?
  x=(); for c in "${ci_arm64[@]}"; do x+=(--cell "$c"); done
  bash "$repo/scripts/kernel-matrix.sh" "${pass[@]}" --thp "$thp" "${x[@]}" || { s2=$?; [ $st -ge $s2 ] || st=$s2; }
  exit $st
fi
[ ${#cells[@]} -gt 0 ] || cells=("${ci_x86[@]}")
known='5.10|6.1|6.12|7.x|6.12-arm64|6.12-arm64-16k|7.x-arm64|7.x-arm64-16k'
for c in "${cells[@]}"; do
  case ${c%%:*} in
    5.10|6.1|6.12|7.x|6.12-arm64|6.12-arm64-16k|7.x-arm64|7.x-arm64-16k) ;;
    *) [ -n "${custom[${c%%:*}]:-}" ] || die "unknown cell '$c' (KERNEL $known or a --kernel NAME, FS ext4|xfs)" ;;
  esac
  case $c in *:ext4|*:xfs) ;; *) die "unknown cell '$c' (KERNEL $known or a --kernel NAME, FS ext4|xfs)" ;; esac
done
# The guest's machine: aarch64 for the arm64 kernels, x86-64 otherwise
# (a --kernel NAME says which: NAME-arm64 or NAME-arm64-* is an arm64 Image).
arch=
for c in "${cells[@]}"; do
  case ${c%%:*} in *-arm64|*-arm64-*) a=aarch64 ;; *) a=x86_64 ;; esac
  [ -z "$arch" ] || [ "$arch" = "$a" ] || die "x86-64 and aarch64 cells need separate runs ('${cells[0]}' and '$c')"
  arch=$a
done
[ -f "$probe" ] || die "no probe script '$probe'"
[ -z "$extra" ] || [ -d "$extra" ] || die "no directory '$extra'"
case $(readlink -f "${extra:-.}") in "$(pwd)"|"$(pwd)"/*) ;; *) die "--extra must be inside the repository" ;; esac
for m in ${thp//,/ }; do
  case $m in always|madvise|never) ;; *) die "unknown THP mode '$m' (always, madvise, never)" ;; esac
done
[ "$arch" != x86_64 ] || [ "$(uname -m)" = x86_64 ] || die "the x86-64 kernel matrix needs an x86-64 host (this is $(uname -m))"
[ "$(id -u)" -eq 0 ] || die "needs root (apt-get download, mkfs, loop devices)"

source scripts/install-deps.sh
export PATH="$HOME/.cargo/bin:$PATH"
# Per machine: the target directory cargo builds into, the tools for its binaries.
if [ "$arch" = aarch64 ]; then
  rust_target=aarch64-unknown-linux-gnu
  tdir=target/$rust_target
  cross=aarch64-linux-gnu-
  qemu=(qemu-system-aarch64 -M virt)
  console=ttyAMA0
  export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=${cross}gcc
  rustup target list --installed 2>/dev/null | grep -qx "$rust_target" ||
    die "Rust target $rust_target not installed: run scripts/install-deps.sh"
else
  rust_target=
  tdir=target
  cross=
  qemu=(qemu-system-x86_64)
  console=ttyS0
fi
# x86-64: no_timer_check, as cloud images boot under a hypervisor. Under TCG
# on a loaded host the kernel's test of the IO-APIC timer can fail ("8254
# timer not connected to IO-APIC") and the boot then stops there.
kargs=
[ "$arch" = aarch64 ] || kargs=" no_timer_check"
for t in "${qemu[0]}" busybox cpio modinfo xz mkfs.ext4 mkfs.xfs apt-get dpkg-deb python3 "${cross}strip" "${cross:-}gcc"; do
  command -v "$t" >/dev/null 2>&1 || die "'$t' not found: run scripts/install-deps.sh"
done

vm=$repo/target/vm
results=${results:-$vm/results}
mkdir -p "$vm/cache" "$vm/kernels" "$results" "$vm/logs"
started=$(date +%s)
testbins=$vm/testbins${rust_target:+-$arch}.txt
if [ -n "$pending" ]; then
  # The plan without the pending tests, which go on needs=pending lines.
  python3 - "$plan" "$pending" > "$vm/plan.txt" <<'PY' || die "bad --pending file '$pending'"
import sys
skip = {tuple(l.split()[:2]) for l in open(sys.argv[2]) if l.strip() and not l.startswith("#")}
held = []
for line in open(sys.argv[1]):
    w = line.split()
    if not w or w[0].startswith("#"):
        print(line, end="")
        continue
    need = [w.pop(0)] if w[0].startswith("needs=") else []
    keep = [n for n in w[1:] if (w[0], n) not in skip]
    held += [(w[0], n) for n in w[1:] if (w[0], n) in skip]
    if keep:
        print(" ".join(need + [w[0]] + keep))
for key, name in held:
    print(f"needs=pending {key} {name}")
PY
  plan=$vm/plan.txt
fi

# --- 1. build the release binaries, the test binaries and the fixtures ------
if [ $build = 1 ]; then
  say "building (cargo build/test --no-run --release${rust_target:+ --target $rust_target})"
  cargo build --release --workspace --locked ${rust_target:+--target "$rust_target"} >&2
  cargo test --release --workspace --locked --no-run --message-format=json ${rust_target:+--target "$rust_target"} 2>/dev/null \
    | python3 tests/vm/testbins.py > "$testbins"
  CC=${cross}gcc bash tests/fixtures/mkfixtures.sh "$tdir/fixtures" >&2
  CC=${cross}gcc bash tests/fixtures/mkctests.sh "$tdir/ctests" "$tdir/release" "$tdir/fixtures" >&2
fi
if grep -v '^#' "$plan" | grep -q .; then
  [ -s "$testbins" ] || die "no test binaries listed in $testbins (run without --no-build)"
else
  touch "$testbins"
fi

# --- 2. the payload: the repository paths the test binaries use -------------
# The test binaries have their paths compiled in (CARGO_BIN_EXE_hugetext,
# CARGO_MANIFEST_DIR), so the guest gets the same paths, on the disk under test.
payload=$vm/payload
rm -rf "$payload"
mkdir -p "$payload$repo/$tdir/release/deps"
while read -r key exe; do
  grep -qE "^(needs=[^ ]+ )?$key " "$plan" || continue
  "${cross}strip" --strip-debug -o "$payload$exe" "$exe"
done < "$testbins"
"${cross}strip" --strip-debug -o "$payload$repo/$tdir/release/hugetext" "$tdir/release/hugetext"
cp "$tdir/release/libhugetext.so" "$payload$repo/$tdir/release/"
cp -a "$tdir/fixtures" "$tdir/ctests" "$payload$repo/$tdir/"
mkdir -p "$payload$repo/target/vm" && cp "$testbins" "$payload$repo/target/vm/testbins.txt"
rm -rf "$payload$repo/$tdir/fixtures/src"
if [ "$tdir" != target ]; then
  # guest-init.sh and the probes name target/release and target/fixtures.
  for d in release fixtures ctests; do ln -s "${tdir#target/}/$d" "$payload$repo/target/$d"; done
fi
for d in tests/fixtures tests/vm include crates/hugetext-cli/tests/c; do
  mkdir -p "$payload$repo/$d" && cp -a "$d/." "$payload$repo/$d/"
done
cp "$plan" "$payload$repo/tests/vm/plan.txt"
mkdir -p "$payload$repo/scripts" && cp scripts/kernel-bench.sh "$payload$repo/scripts/"
cp "$probe" "$payload$repo/tests/vm/probe-run.sh"
if [ -n "$extra" ]; then
  extra=$(readlink -f "$extra")
  mkdir -p "$payload$extra" && cp -a "$extra/." "$payload$extra/"
fi
# --count: the instruction counter, a qemu plugin (built for this host's
# qemu) and its guest helper (static, for the guest's machine).
if [ $count = 1 ]; then
  mkdir -p "$vm/count"
  gcc -O2 -Wall -shared -fPIC -o "$vm/count/qcount.so" tests/vm/count/qcount.c ||
    die "cannot build the instruction counter's plugin (gcc)"
  "${cross:-}gcc" -O2 -Wall -static -o "$payload$repo/target/vm/marker" tests/vm/count/marker.c ||
    die "cannot build the instruction counter's guest helper (${cross:-}gcc -static)"
  "${cross:-}gcc" -O2 -Wall -static -pthread -o "$payload$repo/target/vm/rahead" tests/vm/count/rahead.c ||
    die "cannot build the instruction counter's readahead probe (${cross:-}gcc -static)"
fi
# Crate manifests: CARGO_MANIFEST_DIR must exist for canonicalize().
for c in crates/*/; do mkdir -p "$payload$repo/$c"; cp "$c/Cargo.toml" "$payload$repo/$c/"; done
payload_mib=$(( $(du -sm "$payload" | cut -f1) + 200 ))
rm -f "$vm/payload.img"
truncate -s "${payload_mib}M" "$vm/payload.img"
mkfs.ext4 -q -F -L htpayload -d "$payload" "$vm/payload.img"

# The aarch64 guest's programs: Debian's arm64 packages (busybox-static and
# the programs the tests call, with the libraries they link), fetched with
# apt-get download into target/vm/cache and unpacked once; ldd cannot list a
# foreign machine's libraries, so every DT_NEEDED is checked instead.
arm64_debs=(busybox-static libc6 libgcc-s1 bash libtinfo6 coreutils libacl1 libattr1 libgmp10
  libselinux1 libpcre2-8-0 util-linux mount libblkid1 libmount1 libsmartcols1 libuuid1 libcap-ng0
  libudev1 xfsprogs libinih1 liburcu8 libdevmapper1.02.1 libedit2 libbsd0 libmd0 e2fsprogs
  libext2fs2 libcom-err2 libss2 sed grep mawk)
arm64_userland() { # ROOT
  local dest=$1 stage=$vm/arm64-userland p deb d f missing
  if [ "$(cat "$stage/.done" 2>/dev/null)" != "${arm64_debs[*]}" ]; then
    say "fetching the arm64 guest's programs (apt-get download ${#arm64_debs[@]} packages)"
    rm -rf "$stage" && mkdir -p "$stage"
    dpkg --print-foreign-architectures | grep -qx arm64 ||
      die "dpkg has no arm64 architecture: run scripts/install-deps.sh"
    ( cd "$vm/cache" && apt-get download -q "${arm64_debs[@]/%/:arm64}" >/dev/null 2>&1 ) ||
      die "apt-get download of the arm64 packages failed (no network, or apt-get update not run since dpkg --add-architecture arm64)"
    for p in "${arm64_debs[@]}"; do
      # the newest download: Debian package file names, sorted by time
      # shellcheck disable=SC2012
      deb=$(ls -t "$vm/cache/${p}"_*_arm64.deb | head -n 1)
      dpkg-deb -x "$deb" "$stage"
    done
    # Merged /usr, as in the root.
    for d in bin sbin lib; do
      # skip anything but a real directory
      # shellcheck disable=SC2015
      [ -d "$stage/$d" ] && [ ! -L "$stage/$d" ] || continue
      mkdir -p "$stage/usr/$d" && cp -a "$stage/$d/." "$stage/usr/$d/" && rm -rf "${stage:?}/$d"
    done
    rm -rf "${stage:?}/usr/share"
    ln -sf mawk "$stage/usr/bin/awk"   # an alternatives link where Debian installs it
    missing=$(find "$stage/usr" -type f -perm -u+x | while read -r f; do
        "${cross}readelf" -d "$f" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'
      done | sort -u | while read -r l; do
        [ -n "$(find "$stage/usr/lib" -name "$l" -print -quit)" ] || echo "$l"
      done | tr '\n' ' ')
    # Programs the tests never call may miss theirs (su: PAM, xfs_scrub: ICU).
    for l in $missing; do
      case $l in libpam*|libicu*|libcrypt.so*|libsystemd*|libz.so*) ;; *) die "arm64 guest: no package gives $l (add it to arm64_debs)" ;; esac
    done
    echo "${arm64_debs[*]}" > "$stage/.done"
  fi
  cp -a "$stage/usr/." "$dest/usr/"
  # the config is optional: neither step may stop the build
  # shellcheck disable=SC2015
  mkdir -p "$dest/etc" && cp -a "$stage/etc/mke2fs.conf" "$dest/etc/" 2>/dev/null || true
}

# --- 3. the guest root: busybox, the tools the tests call, their libraries --
root=$vm/root
rm -rf "$root"
# Merged /usr like Debian's: /bin/sleep must be the same program as on the host.
mkdir -p "$root"/{usr/bin,usr/sbin,usr/lib,usr/lib64,etc,proc,sys,dev,tmp,run,payload,root}
for d in bin sbin lib lib64; do ln -s "usr/$d" "$root/$d"; done
# aarch64: Debian's arm64 packages; x86-64 (the rest of this step): the
# host's own programs and the libraries ldd names.
if [ "$arch" = aarch64 ]; then arm64_userland "$root"; else
cp "$(command -v busybox)" "$root/usr/bin/busybox"
tools=(bash sh cp mount umount losetup setpriv mkfs.xfs mkfs.ext4 mke2fs xfs_info
       sync stat cat sleep timeout dd sed grep awk env)
copy_with_libs() { # FILE: the file and every library ldd names, at the same paths
  local f=$1
  mkdir -p "$root$(dirname "$f")"
  cp -L "$f" "$root$f"
  { ldd "$f" 2>/dev/null || true; } | { grep -o '/[^ ]*' || true; } | while read -r l; do
    [ -e "$root$l" ] && continue
    mkdir -p "$root$(dirname "$l")"
    cp -L "$l" "$root$l"
  done
}
for t in "${tools[@]}"; do
  p=$(command -v "$t" 2>/dev/null) || continue
  case $(readlink -f "$p") in */busybox) continue ;; esac
  copy_with_libs "$(readlink -f "$p")"
  [ "$(readlink -f "$p")" = "$p" ] || { mkdir -p "$root$(dirname "$p")"; ln -sf "$(readlink -f "$p")" "$root$p"; }
done
# The libraries the Rust binaries and fixtures link, and what glibc dlopens.
for f in target/release/hugetext target/release/libhugetext.so target/fixtures/*/pie target/ctests/*; do
  copy_with_libs "$(readlink -f "$f")"
done
if [ -n "$extra" ]; then
  for f in "$extra"/*; do
    [ -f "$f" ] && [ -x "$f" ] && ldd "$f" > /dev/null 2>&1 && copy_with_libs "$f"
  done
fi
for l in libgcc_s.so.1 libnss_files.so.2; do
  p=$(ldconfig -p | awk -v l="$l" '$1 == l && /x86-64/ && !n++ {print $NF}')
  [ -n "$p" ] && copy_with_libs "$p"
done
# The dynamic loader at its real path too (ldd names /lib64/..., a symlink on
# Debian): an rtld audit module's namespace (`hugetext run` names
# libhugetext.so in LD_AUDIT) loads libc, which needs ld-linux-x86-64.so.2
# found by the library search path.
ldso=$(readlink -f /lib64/ld-linux-x86-64.so.2)
[ -e "$root$ldso" ] || { mkdir -p "$root$(dirname "$ldso")"; cp -L "$ldso" "$root$ldso"; }
fi
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n' > "$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' > "$root/etc/group"
cp tests/vm/guest-init.sh "$root/init"
: > "$root/modules.order"
chmod 755 "$root/init"

# --- 4. per kernel: fetch with apt, extract, add the modules -----------------
# A private apt configuration (scripts/lib/debian-apt.sh): Debian's suites
# that carry the kernels, lists and cache under target/vm/apt.
aptd=$vm/apt
# shellcheck source=scripts/lib/debian-apt.sh
. scripts/lib/debian-apt.sh
fetch_kernel() { # SERIES -> prints the extracted directory
  local series=$1 re pkg dir p debs=() abi
  case $series in
    5.10) re='^linux-image-5\.10\.0-[0-9]+-cloud-amd64$' ;;
    6.1) re='^linux-image-6\.1\.0-[0-9]+-cloud-amd64$' ;;
    6.12) re='^linux-image-6\.12\.[0-9]+\+deb[0-9]+-cloud-amd64$' ;;
    7.x) re='^linux-image-7\.[0-9]+\.[0-9]+\+deb[0-9]+-cloud-amd64$' ;;
    6.12-arm64) re='^linux-image-6\.12\.[0-9]+\+deb[0-9]+-cloud-arm64-unsigned$' ;;
    6.12-arm64-16k) re='^linux-image-6\.12\.[0-9]+\+deb[0-9]+-arm64-16k-unsigned$' ;;
    7.x-arm64) re='^linux-image-7\.[0-9]+\.[0-9]+\+deb[0-9]+-cloud-arm64$' ;;
    7.x-arm64-16k) re='^linux-image-7\.[0-9]+\.[0-9]+\+deb[0-9]+-arm64-16k$' ;;
  esac
  debian_apt_ready
  pkg=$(debian_apt_cache pkgnames linux-image- 2>/dev/null | grep -E "$re" | sort -V | tail -n 1 || true)
  [ -n "$pkg" ] || die "apt knows no package matching $re (target/vm/apt/sources.list)"
  dir=$vm/kernels/$pkg
  if [ ! -e "$dir/.done" ]; then
    # Since 7.x, linux-image-ABI is an empty package: the kernel is in
    # linux-binary-ABI, the modules in linux-modules-ABI.
    abi=${pkg#linux-image-}
    if debian_apt_cache pkgnames "linux-binary-$abi" 2>/dev/null | grep -qx "linux-binary-$abi"; then
      debs=("linux-binary-$abi" "linux-modules-$abi")
    else
      debs=("$pkg")
    fi
    say "fetching ${debs[*]}"
    rm -rf "$dir" && mkdir -p "$dir"
    ( cd "$vm/cache" && debian_apt download -q "${debs[@]/%/${rust_target:+:arm64}}" >/dev/null 2>&1 ) ||
      die "apt-get download ${debs[*]} failed (no network or no such package)"
    for p in "${debs[@]}"; do
      # the newest download: Debian package file names, sorted by time
      # shellcheck disable=SC2012
      dpkg-deb -x "$(ls -t "$vm/cache/${p}"_*.deb | head -n 1)" "$dir"
    done
    touch "$dir/.done"
  fi
  echo "$dir"
}
first_of() { # PATH... -> the first that exists (globs that matched nothing stay unexpanded)
  local p
  for p in "$@"; do [ -e "$p" ] && { echo "$p"; return 0; }; done
  return 0
}
kdir_image() { # KDIR -> the kernel image in it (/boot, or /usr/lib/modules/VER/ since 7.x)
  first_of "$1"/boot/vmlinuz-* "$1"/usr/lib/modules/*/vmlinuz
}

# Modules a guest needs, in load order (each after its depends= from .modinfo).
want_modules=(virtio_pci virtio_blk loop xfs)
# arm64: virtio over PCI or MMIO (-M virt), and ext4 is a module of the
# generic (16k) flavour; the payload disk is ext4. crc32c first: libcrc32c and
# ext4 ask the crypto API for it when they load (softdep pre: crc32c).
[ "$arch" = x86_64 ] || want_modules=(crc32c_generic virtio_pci virtio_mmio virtio_blk loop ext4 xfs)
add_modules() { # KDIR -> copies decompressed modules into the root, writes /modules.order
  local kdir=$1 mdir ver
  mdir=$(first_of "$kdir"/lib/modules/*/ "$kdir"/usr/lib/modules/*/)
  ver=$(basename "$mdir")
  rm -rf "$root/lib/modules"
  mkdir -p "$root/lib/modules/$ver"
  : > "$root/modules.order"
  declare -A seen=()
  add_one() {
    local name=$1 f dep
    [ -n "${seen[$name]:-}" ] && return
    seen[$name]=1
    f=$(find "$mdir" -name "$name.ko" -o -name "$name.ko.xz" -o -name "$name.ko.zst" | sort | sed -n 1p)
    [ -n "$f" ] || return 0   # built in
    for dep in $(modinfo -F depends "$f" | tr ',' ' '); do add_one "$dep"; done
    case $f in
      *.xz) xz -dc "$f" > "$root/lib/modules/$ver/$name.ko" ;;
      *.zst) zstd -qdc "$f" > "$root/lib/modules/$ver/$name.ko" ;;
      *) cp "$f" "$root/lib/modules/$ver/$name.ko" ;;
    esac
    echo "$name" >> "$root/modules.order"
  }
  local m
  for m in "${want_modules[@]}"; do add_one "$m"; done
  # Modules the kernel loads by name (libcrc32c asks for crc32c; since 6.15
  # the crypto API's crc32c is crc32c-cryptoapi).
  for m in crc32c_generic crc32c-intel crc32c_intel crc32c-cryptoapi; do add_one "$m"; done
}

# --- 5. KVM when it works, TCG otherwise --------------------------------------
kernel_image() { # SERIES-or-NAME -> the kernel to boot
  if [ -n "${custom[$1]:-}" ]; then echo "${custom[$1]}"; else kdir_image "$(fetch_kernel "$1")"; fi
}
accel=(-accel tcg -cpu max)
# arm64 under TCG: pointer authentication with QEMU's own cheap hash instead
# of the architected QARMA (several times faster, same instructions).
# the commas belong to the -cpu value
# shellcheck disable=SC2054
[ "$arch" = x86_64 ] || accel=(-accel tcg -cpu max,pauth-impdef=on)
if [ -w /dev/kvm ] && [ "$arch" = x86_64 ]; then
  if timeout 20 qemu-system-x86_64 -accel kvm -cpu host -m 256M -nographic -no-reboot \
       -kernel "$(kernel_image "${cells[0]%%:*}")" \
       -append "console=ttyS0 panic=-1 rdinit=/bin/true" 2>/dev/null | grep -q 'Linux version'; then
    accel=(-accel kvm -cpu host)
  fi
fi
# The counter is a TCG plugin: --count never uses KVM.
if [ $count = 1 ] && [ "${accel[1]}" != tcg ]; then
  accel=(-accel tcg -cpu max)
fi
say "qemu accelerator: ${accel[1]}"

# --- 6. boot each cell ---------------------------------------------------------
failed=0
for cell in "${cells[@]}"; do
  series=${cell%%:*}
  fs=${cell##*:}
  if [ -n "${custom[$series]:-}" ]; then
    kimg=${custom[$series]}
    kname=$series
    rm -rf "$root/lib/modules" && : > "$root/modules.order"
  else
    kdir=$(fetch_kernel "$series")
    add_modules "$kdir"
    kimg=$(kdir_image "$kdir")
    kname=$(basename "$kdir")
  fi
  cat > "$root/ht.env" <<EOF
HT_REPO='$repo'
HT_FS='$fs'
HT_THP='${thp//,/ }'
HT_CELL='$cell'
HT_DEADLINE='$(( timeout_s > 600 ? timeout_s - 180 : timeout_s * 3 / 4 ))'
HT_PROBE='tests/vm/probe-run.sh'
HT_COUNT='$count'
EOF
  (cd "$root" && find . | cpio -o -H newc --quiet) | gzip -1 > "$vm/root-$series.cpio.gz"
  disk=$vm/disk-$fs.img
  rm -f "$disk"
  truncate -s 6G "$disk"
  log=$vm/logs/$series-$fs.log
  res=$results/$series-$fs.json
  counts=$vm/logs/$series-$fs.counts
  plugin=()
  # QCOUNT_WATCH=0xADDR,...: the plugin also counts how often those
  # instructions ran in each interval; QCOUNT_IRQ=0xADDR,...: the interrupt
  # entries whose handlers it counts apart (tests/vm/count/qcount.c; boot
  # with --append nokaslr, so that the kernel's System.map holds).
  # QCOUNT_SYMS=SYSTEM.MAP QCOUNT_SPLIT=LO-HI: the kernel instructions of
  # the intervals of ids LO..HI by kernel function (counts.py split).
  qargs=${QCOUNT_WATCH:+,watch=${QCOUNT_WATCH//,/,watch=}}${QCOUNT_IRQ:+,irq=${QCOUNT_IRQ//,/,irq=}}
  qargs=$qargs${QCOUNT_SYMS:+,syms=$(readlink -f "$QCOUNT_SYMS")}${QCOUNT_SPLIT:+,split=$QCOUNT_SPLIT}
  [ $count = 0 ] || plugin=(-plugin "$vm/count/qcount.so$qargs" -d plugin -D "$counts")
  for attempt in 1 2; do
    say "booting $cell ($kname), log: ${log#"$repo"/}"
    t0=$(date +%s)
    # A non-zero status is the guest's to report below (the ERR trap would
    # stop the script before the console tail is shown): hence `|| rc=$?`.
    rc=0
    rm -f "$counts"
    timeout --foreground -k 10 "$timeout_s" nice "${qemu[@]}" "${accel[@]}" "${plugin[@]}" -m 3G -smp 2 -nographic -no-reboot \
      -kernel "$kimg" \
      -initrd "$vm/root-$series.cpio.gz" \
      -append "console=$console panic=-1 quiet$kargs${append:+ $append}" \
      -drive "file=$disk,if=virtio,format=raw,cache=unsafe" \
      -drive "file=$vm/payload.img,if=virtio,format=raw,readonly=on" \
      < /dev/null > "$log" 2>&1 || rc=$?
    secs=$(( $(date +%s) - t0 ))
    # split on purpose: one JSON string per mode
    # shellcheck disable=SC2086
    thp_json=$(printf '"%s",' ${thp//,/ }); thp_json="[${thp_json%,}]"
    meta="{\"cell\":\"$cell\",\"arch\":\"$arch\",\"kernel_pkg\":\"$kname\",\"seconds\":$secs,\"qemu_status\":$rc,\"accel\":\"${accel[1]}\",\"date\":\"$(date -u +%F)\",\"thp\":$thp_json}"
    python3 tests/vm/matrix.py collect "$log" "$plan" "$meta" > "$res"
    if [ $rc = 124 ] || [ $rc = 137 ]; then
      say "$cell: guest did not finish in ${timeout_s}s; killed. Console tail:"
      tail -n 40 "$log" | tr -d '\r' >&2
    elif ! grep -q '"finished": true' "$res" && ! grep -q '"unsupported": "' "$res"; then
      say "$cell: guest stopped without finishing (qemu status $rc). Console tail:"
      tail -n 40 "$log" | tr -d '\r' >&2
    fi
    # Where a suite or the guest was stuck (guest-init.sh's watchdogs).
    if grep -q '@@STUCK' "$log"; then
      say "$cell: the guest reported stuck processes:"
      grep -a '@@STUCK' "$log" | tr -d '\r' | head -n 300 >&2
    fi
    ok=1
    python3 tests/vm/matrix.py summary "$res" >&2 || ok=0
    if [ $count = 1 ]; then
      # The counter's self-check (tests/vm/count/counts.py) and its counts.
      if [ -s "$counts" ]; then
        python3 tests/vm/count/counts.py merge "$res" "$counts" "$arch" "$log" >&2 || ok=0
      else
        say "$cell: the instruction counter wrote nothing (${counts#"$repo"/})"; ok=0
      fi
    fi
    [ $ok = 1 ] && break
    # --retry-hung (CI) boots a cell once more only when its guest hung (a watchdog's
    # @@STUCK report, or killed at the timeout) or its kernel died before /init
    # ran (no boot line: 7.3.4 under TCG once took an int3 Oops in
    # sched_clock_cpu during early boot), never for a failed test: both runs
    # are reported above, and the second must pass.
    if [ $retry_hung = 1 ] && [ $attempt = 1 ] && { [ $rc = 124 ] || [ $rc = 137 ] || grep -q '@@STUCK' "$log" ||
         ! grep -aq '@@HT {"kind":"boot"' "$log"; }; then
      cp "$log" "$log.hung"
      say "$cell: the guest hung or died before /init (its log is kept as ${log#"$repo"/}.hung); booting it once more"
      truncate -s 0 "$disk" && truncate -s 6G "$disk"
      continue
    fi
    failed=1
    break
  done
  rm -f "$disk"
done

if [ $write_doc = 1 ]; then
  python3 tests/vm/matrix.py doc "$results"/*.json
  say "wrote doc/kernels.md and doc/kernels.json"
elif [ $write_doc = 2 ]; then
  python3 tests/vm/matrix.py doc --merge "$results"/*.json
  say "merged the probes into doc/kernels.json; wrote doc/kernels.md"
fi
say "wall time $(( $(date +%s) - started )) s"
exit $failed
