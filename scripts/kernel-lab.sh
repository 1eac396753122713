#!/usr/bin/env bash
# The kernel lab: Debian's Linux 6.12 or 7.3 source (apt's linux-source-6.12,
# linux-source-7.3), built unpatched ("stock") and with the patch series
# kernel/6.12/*.patch or kernel/7.x/*.patch ("patched") from the same
# configuration (x86_64_defconfig +
# kvm_guest.config + kernel/lab.config), booted in qemu with the
# kernel-matrix harness (scripts/kernel-matrix.sh), and measured there on an
# ext4 and an xfs disk by tests/vm/lab-probe.sh; doc/kernel.md is generated
# from the results (tests/vm/lab.py).
#
#   scripts/kernel-lab.sh [--series 6.12|7.x] [--build-only] [--rebuild]
#                         [--cell VARIANT:FS]... [--thp MODE] [--timeout SECONDS]
#                         [--bench] [--write-doc]
#   scripts/kernel-lab.sh [--series 6.12|7.x] --package [--arch x86_64|arm64|all]
#   scripts/kernel-lab.sh --series 7.x --lockstat
#   scripts/kernel-lab.sh --check
#
#   --series      which series and source: 6.12 (kernel/6.12/ on
#                 linux-source-6.12, the default) or 7.x (kernel/7.x/ on
#                 linux-source-7.3); each has its own trees and results
#   --build-only  build (or find up to date) both kernels, boot nothing
#   --rebuild     run make even when the cached kernel is up to date
#   --cell        patched:xfs stock:xfs patched:ext4 stock:ext4 (default: all four);
#                 6.12 also base:xfs and base:ext4: stock with only the
#                 series' mainline backports (kernel/6.12/0001, 0002: exec
#                 readahead), the guard's reference for the patched kernel
#                 with its features off. Built in the stock tree in place
#                 (the backports applied, make, the image kept in base/,
#                 the tree restored and made again: only mm/filemap.o
#                 recompiles each way); it measures the plain execs and
#                 the guard only
#   --thp MODE    THP mode in the guests (default always, Debian's default);
#                 another mode (madvise, never) boots for KUnit and the
#                 selftests only, which must skip what it turns off, and
#                 keeps its results apart (results-7.x-thp-MODE/)
#   --bench       instead of the exec measurements: `bench mprotect` with
#                 vm.mprotect_pte_batch off and on (default cell
#                 patched:xfs; results in results-bench/; under TCG the
#                 times are emulated)
#   --package     build (or find up to date) both kernels, then installable
#                 Debian packages of each (make bindeb-pkg in its built tree:
#                 links and packages, reusing the objects), x86-64, into
#                 target/kernel-lab/packages/, and list them. The kernel
#                 release names the variant (7.3.4-ht-stock, 7.3.4-ht-patched;
#                 6.12: 6.12.N-ht-...), so both install side by side; boots
#                 nothing
#   --arch        with --package: x86_64 (the default), arm64 or all.
#                 arm64 (7.x only): both kernels cross-built
#                 (aarch64-linux-gnu-gcc) in trees of their own,
#                 target/kernel-lab/arm64/src-7.x-stock and
#                 src-7.x-patched (the x86-64 trees are not touched), from
#                 arm64's defconfig with every ARCH_* platform off and
#                 kernel/arm64-lab.config (no modules; what
#                 `qemu-system-aarch64 -M virt` has: PCI, virtio, PL011)
#                 merged over kvm_guest.config and kernel/lab.config, so
#                 the series' options are x86-64's; patched is a copy of
#                 the built stock tree with the series applied (its header
#                 changes recompile most of it). make
#                 bindeb-pkg builds and packages each: linux-image and
#                 linux-libc-dev (named ..._VERSION-ht-VARIANT_arm64.deb),
#                 no linux-headers (no modules). tests/vm/arm64-selftests.sh
#                 --kernel boots such an image
#   --lockstat    7.x: the lock-statistics kernels, stock and patched, built
#                 apart in target/kernel-lab/lockstat/ (src-stock/,
#                 src-patched/; the lab configuration with
#                 kernel/lockstat.config: CONFIG_LOCK_STAT and CONFIG_MEMCG,
#                 a full build of their own, the patched tree a copy of the
#                 built stock one with the series applied), each booted
#                 once (xfs, or the --cell given; THP madvise, the
#                 instruction counter on) with
#                 tests/vm/count/probe-lockstat.sh: the readahead counts of
#                 /proc/lock_stat's i_pages class, then the series' mm
#                 selftest readahead_memcg (readahead into a memory cgroup
#                 at its limit); results in results-7.x-lockstat/, the
#                 table by tests/vm/count/counts.py readahead
#   --write-doc   regenerate doc/kernel.md and doc/kernel.json from the results
#                 of both series (each one's last exec run, the last --bench run,
#                 7.x's last boots under THP madvise and never, and the arm64
#                 16 KiB selftest run of tests/vm/arm64-selftests.sh)
#   --check       the CI check, for both series: kernel/6.12/ against
#                 linux-source-6.12 and kernel/7.x/ against linux-source-7.3
#                 (and the patch of kernel/7.x/standalone/, which must be
#                 the same change as kernel/7.x/0001, on its own).
#                 Each applies to the pristine packaged source (git apply
#                 --check), is clean under that tree's scripts/checkpatch.pl
#                 --strict and adds no scripts/kernel-doc warning, the C
#                 files it changes (and its KUnit tests)
#                 compile for x86-64 and, with Debian's cross compilers,
#                 for arm64 (4 KiB pages), ppc64el, s390x and riscv64
#                 (touched objects only, each from its defconfig), and
#                 the selftests it changes compile; and the figures the 7.x
#                 patches quote are those of doc/kernel.json (lab.py
#                 figures); no full build, no boot
#
# Caches (target/kernel-lab/): the source packages (cache/; fetched with a
# private apt configuration, scripts/lib/debian-apt.sh), the --check trees
# (check/VERSION: a git repository of the pristine source, built out of
# tree in check/VERSION-ARCH for each of the five architectures, so that a later
# check only recompiles what the series changes), one source tree
# per variant (src-stock/, src-patched/; 7.x: src-7.x-stock/, src-7.x-patched/)
# built in place, each a git
# repository of the pristine source (stock: that commit; patched: the series
# on top). Whichever tree is built first, the other is a copy of it
# (cp -a) switched with git, so its first build only recompiles what the
# series touches and relinks; a build whose inputs (source version,
# configuration, series) did not change is skipped, and a tree switched to
# a new state of its series gives the files that come out the same their
# times back (an edit to one patch recompiles only what it changed; the
# 6.12 base kernel is made in the stock tree, see --cell). Build times go to
# build-times.jsonl. Results: results/ (6.12), results-7.x/, results-bench/;
# a boot with a THP mode other than `always` keeps its own
# (results-7.x-thp-madvise/, ...), which --write-doc shows in a table of
# its own.
# The guests run the series' KUnit suites (built in) and, in the xfs cells,
# the mm selftests built from the patched tree (tests/vm/lab-probe.sh).
# Exit status: 0 when everything passed, 1 when a guest check failed, 2 for
# bad usage, a missing tool, or a failed build.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

die() { echo "kernel-lab: $*" >&2; exit 2; }
say() { echo "kernel-lab: $*" >&2; }

build_only=0
package=0
arch=
lockstat=0
rebuild=0
check=0
write_doc=0
bench=0
ser=6.12
cells=()
thp=always
timeout_s=5400
while [ $# -gt 0 ]; do
  case $1 in
    --build-only) build_only=1 ;;
    --package) package=1 ;;
    --arch) shift; case ${1:-} in x86_64|arm64|all) arch=$1 ;; *) die "unknown architecture '${1:-}' (x86_64, arm64 or all)" ;; esac ;;
    --lockstat) lockstat=1 ;;
    --rebuild) rebuild=1 ;;
    --check) check=1 ;;
    --write-doc) write_doc=1 ;;
    --bench) bench=1 ;;
    --series) shift; case ${1:-} in 6.12|7.x) ser=$1 ;; *) die "unknown series '${1:-}' (6.12 or 7.x)" ;; esac ;;
    --cell) shift; case ${1:-} in stock:ext4|stock:xfs|patched:ext4|patched:xfs|base:ext4|base:xfs) cells+=("$1") ;;
              *) die "unknown cell '${1:-}' (stock|patched|base:ext4|xfs)" ;; esac ;;
    --thp) shift; thp=${1:?--thp needs a mode} ;;
    --timeout) shift; timeout_s=${1:?--timeout needs seconds} ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  shift
done
if [ ${#cells[@]} -eq 0 ]; then
  cells=(patched:xfs stock:xfs patched:ext4 stock:ext4)
  [ $lockstat = 1 ] && cells=(stock:xfs patched:xfs)
  [ $bench = 1 ] && cells=(patched:xfs)
fi
if [ $bench = 1 ]; then
  [ "$ser" = 6.12 ] || die "--bench measures the 6.12 series' vm.mprotect_pte_batch switch; 7.3 batches mprotect() itself"
  for c in "${cells[@]}"; do [ "${c%%:*}" = patched ] || die "--bench needs patched cells (the switches are the series')"; done
fi
if [ -n "$arch" ]; then
  [ $package = 1 ] || die "--arch is for --package (the lab's guests are x86-64)"
  [ "$arch" = x86_64 ] || [ "$ser" = 7.x ] || die "arm64 packages are built for the 7.x series (--series 7.x)"
else
  arch=x86_64
fi
[ $lockstat = 0 ] || [ "$ser" = 7.x ] || die "--lockstat is for the 7.x series (its batched insertion RFC)"
if [ "$ser" != 6.12 ]; then
  for c in "${cells[@]}"; do [ "${c%%:*}" != base ] || die "base cells are 6.12's (7.3 has mainline's exec readahead itself)"; done
fi
[ "$(uname -m)" = x86_64 ] || die "the lab builds x86-64 kernels on an x86-64 host (this is $(uname -m))"

for t in make gcc ld flex bison bc perl git tar xz dpkg-deb apt-get python3 nice patch; do
  command -v "$t" > /dev/null 2>&1 || die "'$t' not found: run scripts/install-deps.sh"
done
[ -e /usr/include/libelf.h ] || [ -e /usr/include/gelf.h ] || die "libelf headers not found (libelf-dev): run scripts/install-deps.sh"

lab=$repo/target/kernel-lab
cache=$lab/cache
mkdir -p "$cache"
series=("$repo"/kernel/"$ser"/*.patch)
[ -e "${series[0]}" ] || die "no patches in kernel/$ser/"
# Per series: the source version, the trees' and results' prefix, the guest
# kernels' names (6.12 keeps the names it always had).
case $ser in
  6.12) srcver=6.12 pre='' kname=lab ;;
  7.x) srcver=7.3 pre=7.x- kname=lab7 ;;
esac
jobs=$(nproc)

# --- the sources: linux-source-VERSION, fetched with apt and cached --------
# A private apt configuration (Debian's suites with the kernels: bookworm-
# security has linux-source-6.12, trixie-backports linux-source-7.3), shared
# with scripts/kernel-matrix.sh; the system's sources list is not used.
aptd=$repo/target/vm/apt
# shellcheck source=scripts/lib/debian-apt.sh
. scripts/lib/debian-apt.sh
# shellcheck source=scripts/lib/linux-source.sh
. scripts/lib/linux-source.sh

# The lab configuration (and the fragments given after the tree), written
# only when it differs from the tree's, so that an unchanged configuration
# never makes make rebuild anything.
configure() { # TREE [FRAGMENT...]
  local t=$1
  shift
  (
    cd "$t"
    [ -f .config ] && cp -p .config .config.lab-old
    make -s x86_64_defconfig > /dev/null
    scripts/kconfig/merge_config.sh -m .config kernel/configs/kvm_guest.config "$repo/kernel/lab.config" "$@" > .merge.log 2>&1 ||
      { cat .merge.log >&2; exit 1; }
    make -s olddefconfig > /dev/null
    if [ -f .config.lab-old ] && cmp -s .config .config.lab-old; then
      mv .config.lab-old .config
    else
      rm -f .config.lab-old
    fi
    for o in TRANSPARENT_HUGEPAGE EXT4_FS XFS_FS BLK_DEV_LOOP VIRTIO_BLK VIRTIO_PCI PROC_PAGE_MONITOR DEVTMPFS SERIAL_8250_CONSOLE; do
      grep -q "^CONFIG_$o=y" .config || { echo "kernel-lab: CONFIG_$o is not built in" >&2; exit 1; }
    done
  ) || die "configuring $t failed"
}

# --- the CI check: each series applies, is clean, and what it changes compiles
if [ $check = 1 ]; then
  t0=$(date +%s)
  for cc in aarch64-linux-gnu-gcc powerpc64le-linux-gnu-gcc s390x-linux-gnu-gcc riscv64-linux-gnu-gcc; do
    command -v $cc > /dev/null 2>&1 || die "'$cc' not found: run scripts/install-deps.sh"
  done
  # The figures the 7.x patches quote are the lab record's (doc/kernel.json).
  python3 tests/vm/lab.py figures doc/kernel.json || die "a 7.x patch or its cover letter quotes figures that are not the lab record's"
  tb612=$(source_tarball 6.12) || exit 2
  tb73=$(source_tarball 7.3) || exit 2
  bash scripts/lib/kernel-check.sh 6.12 "$tb612" kernel/6.12 || exit 2
  # The soft-dirty fix is also posted alone (kernel/7.x/standalone/): the
  # same change as the series' first patch, checked on its own too.
  for p in kernel/7.x/standalone/*.patch; do
    first=(kernel/7.x/0001-*.patch)
    [ "$(git patch-id --stable < "$p" | cut -d' ' -f1)" = "$(git patch-id --stable < "${first[0]}" | cut -d' ' -f1)" ] ||
      die "$p is not the same change as ${first[0]}"
  done
  bash scripts/lib/kernel-check.sh 7.x-standalone "$tb73" kernel/7.x/standalone 7.x || exit 2
  bash scripts/lib/kernel-check.sh 7.x "$tb73" kernel/7.x || exit 2
  say "check passed in $(( $(date +%s) - t0 )) s"
  exit 0
fi

# --- build: whichever tree is built first, the other derived from it --------
# Both trees are git repositories of the pristine source (tag `pristine`):
# stock is that commit, patched is the series on top (git am). A tree that
# does not exist yet is a copy (cp -a: the objects and their times kept) of
# the other variant's built tree, switched with git to its own state, so its
# first build only recompiles what the series touches and relinks; only when
# neither tree is built is the source unpacked and built from scratch.
lab_git() { git -c user.name=kernel-lab -c user.email=kernel-lab@localhost "$@"; }
state_of() { # VARIANT -> what the tree's source must be
  if [ "$1" = patched ]; then cat "${series[@]}" | sha256sum | cut -c1-16; else echo pristine; fi
}
built_tree() { # VARIANT: true when that tree holds a built kernel of this source
  [ "$(cat "$lab/src-$pre$1/.lab-source" 2> /dev/null)" = "$(basename "$tb")" ] && [ -s "$lab/src-$pre$1/arch/x86/boot/bzImage" ]
}
build() { # VARIANT -> builds target/kernel-lab/src-VARIANT/arch/x86/boot/bzImage
  local v=$1 other=stock
  [ "$v" = stock ] && other=patched
  local tree=$lab/src-$pre$v key log t0 secs kind="make after a change"
  t0=$(date +%s)
  key=$( { basename "$tb"; cat "$repo/kernel/lab.config"; state_of "$v"; } | sha256sum | cut -c1-16)
  if [ "$(cat "$tree/.lab-source" 2> /dev/null)" != "$(basename "$tb")" ]; then
    if built_tree "$other"; then
      say "copying the built $other tree to ${tree#"$repo"/} (its objects are reused)"
      # die when any of the three steps fails
      # shellcheck disable=SC2015
      rm -rf "$tree" "$tree.tmp" && cp -a "$lab/src-$pre$other" "$tree.tmp" && mv "$tree.tmp" "$tree" ||
        die "copying ${lab#"$repo"/}/src-$pre$other to ${tree#"$repo"/} failed (disk full?)"
      rm -f "$tree/.lab-state" "$tree/.lab-series" "$tree/.lab-built"
      echo "derived from the built $other tree (cp -a, git checkout): what the series touches recompiled, relinked" > "$tree/.lab-kind"
    else
      say "unpacking $(basename "$tb") into ${tree#"$repo"/}"
      unpack "$tb" "$tree"
      (cd "$tree" && git init -q && git add -A -f &&
        lab_git commit -q -m "$(basename "$tb" .tar.xz), pristine" &&
        git tag -f pristine > /dev/null) || die "git init of ${tree#"$repo"/} failed"
      basename "$tb" > "$tree/.lab-source"
      kind="clean build"
    fi
  fi
  # The source state: git rewrites only the files that differ (new mtimes),
  # so make recompiles just those. A copy has new inodes and ctimes: git
  # compares mtime and size only, or it would read the whole tree again.
  if [ "$(cat "$tree/.lab-state" 2> /dev/null)" != "$(state_of "$v")" ]; then
    # The files the tree's last state changed from the pristine source, with
    # their times: the switch below rewrites them all, and those that come
    # out the same get their times back, so that make rebuilds only what
    # really changed (a series edit to one patch's message or one test
    # recompiles nothing else). Only when they are as the last commit has
    # them (not after an interrupted git am).
    local old mt=$lab/mtimes-$pre$v
    : > "$mt"
    old=$(cd "$tree" && git rev-parse -q --verify HEAD 2> /dev/null) || old=
    if [ -n "$old" ] && (cd "$tree" && git diff --quiet "$old" -- && git diff --quiet --cached "$old" --) 2> /dev/null; then
      (cd "$tree" && git diff --name-only pristine "$old" | while IFS= read -r f; do
        [ -f "$f" ] && printf '%s\t%s\n' "$(stat -c %Y "$f")" "$f"
      done) > "$mt"
    fi
    (cd "$tree" && git config core.trustctime false && git config core.checkStat minimal && { git am --abort > /dev/null 2>&1 || true; } && git checkout -q -f -B "$v" pristine) > "$lab/git.log" 2>&1 ||
      die "git checkout of the pristine source in ${tree#"$repo"/} failed: $(grep -m 1 -E 'fatal|error' "$lab/git.log" || tail -n 1 "$lab/git.log")"
    if [ "$v" = patched ]; then
      (cd "$tree" && lab_git am -q "${series[@]}" > "$lab/am.log" 2>&1) ||
        die "the series does not apply to ${tree#"$repo"/}: $(grep -m 1 -E 'error|failed' "$lab/am.log" || tail -n 1 "$lab/am.log")"
    fi
    if [ -s "$mt" ]; then
      (cd "$tree" && git diff --name-only "$old" HEAD > "$mt.changed" &&
        while IFS=$'\t' read -r t f; do
          [ -f "$f" ] && ! grep -qxF -- "$f" "$mt.changed" && touch -m -d "@$t" -- "$f"
        done < "$mt"; true) || die "restoring the times of unchanged files in ${tree#"$repo"/} failed"
      say "$v: $(wc -l < "$mt.changed") files changed since the tree's last state; the others keep their times"
    fi
    rm -f "$mt" "$mt.changed"
    state_of "$v" > "$tree/.lab-state"
  fi
  configure "$tree"
  # A tree copied by an earlier, interrupted run is still a derived one.
  [ -s "$tree/.lab-kind" ] && kind=$(cat "$tree/.lab-kind")
  if [ $rebuild = 0 ] && [ "$(cat "$tree/.lab-built" 2> /dev/null)" = "$key" ] && [ -s "$tree/arch/x86/boot/bzImage" ]; then
    secs=$(( $(date +%s) - t0 ))
    echo "{\"series\":\"$ser\",\"variant\":\"$v\",\"kind\":\"no change: make skipped\",\"seconds\":$secs,\"date\":\"$(date -u +%FT%TZ)\",\"jobs\":$jobs}" >> "$lab/build-times.jsonl"
    say "$v kernel up to date (${tree#"$repo"/}/arch/x86/boot/bzImage, $secs s)"
    return
  fi
  log=$lab/build-$pre$v.log
  say "building the $v kernel (nice make -j$jobs bzImage; $kind), log: ${log#"$repo"/}"
  (cd "$tree" && nice -n 5 make -j"$jobs" bzImage > "$log" 2>&1) ||
    die "building the $v kernel failed: $(first_error "$log") (see ${log#"$repo"/})"
  secs=$(( $(date +%s) - t0 ))
  echo "$key" > "$tree/.lab-built"
  rm -f "$tree/.lab-kind"
  echo "{\"series\":\"$ser\",\"variant\":\"$v\",\"kind\":\"$kind\",\"seconds\":$secs,\"date\":\"$(date -u +%FT%TZ)\",\"jobs\":$jobs}" >> "$lab/build-times.jsonl"
  say "$v kernel built in $secs s"
}

# The base kernel (6.12): stock with only the series' mainline backports
# (0001, 0002: exec readahead), which change the exec fault's reads under
# every THP mode; the guard's reference for the patched kernel with its
# features off. No tree of its own: the backports are applied to the built
# stock tree, made (only what they touch recompiles), the image kept in
# base/, then the tree is restored and made again, so stock stays stock.
base_series=("$repo"/kernel/6.12/0001-*.patch "$repo"/kernel/6.12/0002-*.patch)
image_of() { # VARIANT -> its bzImage
  if [ "$1" = base ]; then echo "$lab/base/bzImage"; else echo "$lab/src-$pre$1/arch/x86/boot/bzImage"; fi
}
build_base() {
  local tree=$lab/src-stock out=$lab/base key log t0 secs files
  t0=$(date +%s)
  key=$( { basename "$tb"; cat "$repo/kernel/lab.config"; cat "${base_series[@]}"; } | sha256sum | cut -c1-16)
  if [ $rebuild = 0 ] && [ "$(cat "$out/.lab-built" 2> /dev/null)" = "$key" ] && [ -s "$out/bzImage" ]; then
    say "base kernel up to date (${out#"$repo"/}/bzImage)"
    return
  fi
  [ "$(cat "$tree/.lab-state" 2> /dev/null)" = pristine ] || die "the stock tree is not pristine: cannot build the base kernel in it"
  files=$(cd "$tree" && git apply --numstat "${base_series[@]}" | cut -f3 | sort -u | tr '\n' ' ')
  log=$lab/build-base.log
  say "building the base kernel in the stock tree (the backports: ${base_series[*]##*/}), log: ${log#"$repo"/}"
  mkdir -p "$out"
  local ok=1
  # the files to restore, kept until they are restored (an interrupted run
  # leaves it for the next, which restores them first)
  echo "$files" > "$tree/.lab-base-applied"
  (cd "$tree" && git apply "${base_series[@]}") > "$log" 2>&1 || die "the backports do not apply to the stock tree (see ${log#"$repo"/})"
  (cd "$tree" && nice -n 5 make -j"$jobs" bzImage >> "$log" 2>&1) || ok=0
  [ $ok = 1 ] && cp "$tree/arch/x86/boot/bzImage" "$out/bzImage.tmp" && mv "$out/bzImage.tmp" "$out/bzImage"
  # shellcheck disable=SC2086 # the file list, split on purpose
  (cd "$tree" && git checkout -q -f HEAD -- $files) || die "restoring the stock tree failed: git checkout in ${tree#"$repo"/}"
  rm -f "$tree/.lab-base-applied"
  [ $ok = 1 ] || { rm -f "$out/.lab-built"; die "building the base kernel failed: $(first_error "$log") (see ${log#"$repo"/})"; }
  echo "$key" > "$out/.lab-built"
  say "remaking the stock kernel from its restored source"
  (cd "$tree" && nice -n 5 make -j"$jobs" bzImage >> "$log" 2>&1) ||
    die "rebuilding the stock kernel failed: $(first_error "$log") (see ${log#"$repo"/})"
  secs=$(( $(date +%s) - t0 ))
  echo "{\"series\":\"$ser\",\"variant\":\"base\",\"kind\":\"the stock tree with the backports, in place, and back\",\"seconds\":$secs,\"date\":\"$(date -u +%FT%TZ)\",\"jobs\":$jobs}" >> "$lab/build-times.jsonl"
  say "base kernel built and stock restored in $secs s"
}

tb=$(source_tarball "$srcver")
t_all=$(date +%s)

# --- --lockstat: the lock-statistics kernels, apart from the lab's trees ----
# Lock statistics change every lock's code: a full build, in trees of their
# own (the lab's trees, which --check and the record use, are not touched).
# Stock is unpacked and built; patched is a copy of the built stock tree
# with the series applied, so only what the series touches recompiles.
if [ $lockstat = 1 ]; then
  lsd=$lab/lockstat
  # The patched tree's state is the series' changes, not its messages: a
  # reworded patch rebuilds nothing.
  ls_state() { # VARIANT
    if [ "$1" = patched ]; then
      for p in "${series[@]}"; do sed -n '/^diff --git /,$p' "$p" | grep -v '^index '; done | sha256sum | cut -c1-16
    else
      echo pristine
    fi
  }
  ls_build() { # VARIANT -> lsd/src-VARIANT/arch/x86/boot/bzImage
    local v=$1 tree=$lsd/src-$1 key log t0 secs
    t0=$(date +%s)
    key=$( { basename "$tb"; cat "$repo/kernel/lab.config" "$repo/kernel/lockstat.config"; ls_state "$v"; } | sha256sum | cut -c1-16)
    if [ "$(cat "$tree/.lab-state" 2> /dev/null)" != "$(ls_state "$v")" ]; then
      if [ "$v" = patched ] && [ -s "$lsd/src-stock/arch/x86/boot/bzImage" ]; then
        say "copying the built lock-statistics stock tree to ${tree#"$repo"/}, the series applied"
        # shellcheck disable=SC2015 # die when any of the three steps fails
        rm -rf "$tree" "$tree.tmp" && cp -a "$lsd/src-stock" "$tree.tmp" && mv "$tree.tmp" "$tree" ||
          die "copying to ${tree#"$repo"/} failed (disk full?)"
      else
        say "unpacking $(basename "$tb") into ${tree#"$repo"/}"
        unpack "$tb" "$tree"
      fi
      rm -f "$tree/.lab-built"
      if [ "$v" = patched ]; then
        # patch(1): inside this repository's work tree, git apply would
        # skip every path (they are outside the directory it runs in)
        (cd "$tree" && for p in "${series[@]}"; do patch -p1 -s -N < "$p" || exit 1; done) > "$lab/am.log" 2>&1 ||
          die "the series does not apply to ${tree#"$repo"/}: $(head -n 1 "$lab/am.log")"
      fi
      ls_state "$v" > "$tree/.lab-state"
    fi
    configure "$tree" "$repo/kernel/lockstat.config"
    if [ $rebuild = 0 ] && [ "$(cat "$tree/.lab-built" 2> /dev/null)" = "$key" ] && [ -s "$tree/arch/x86/boot/bzImage" ]; then
      say "lock-statistics $v kernel up to date (${tree#"$repo"/}/arch/x86/boot/bzImage)"
      return
    fi
    log=$lsd/build-$v.log
    say "building the lock-statistics $v kernel (nice make -j$jobs bzImage), log: ${log#"$repo"/}"
    (cd "$tree" && nice -n 19 make -j"$jobs" bzImage > "$log" 2>&1) ||
      die "building the lock-statistics $v kernel failed: $(first_error "$log") (see ${log#"$repo"/})"
    secs=$(( $(date +%s) - t0 ))
    echo "$key" > "$tree/.lab-built"
    echo "{\"series\":\"$ser\",\"variant\":\"lockstat-$v\",\"kind\":\"lock statistics and memcg\",\"seconds\":$secs,\"date\":\"$(date -u +%FT%TZ)\",\"jobs\":$jobs}" >> "$lab/build-times.jsonl"
    say "lock-statistics $v kernel built in $secs s"
  }
  ls_build stock
  [[ " ${cells[*]} " == *" patched:"* ]] || [ $build_only = 1 ] && ls_build patched
  [ $build_only = 1 ] && exit 0
  # The selftest, static, from the patched tree; the guests mount cgroup2.
  mkdir -p "$lsd/extra"
  gcc -O2 -Wall -static -I "$lsd/src-patched/tools/testing/selftests" -o "$lsd/extra/readahead_memcg" \
    "$lsd/src-patched/tools/testing/selftests/mm/readahead_memcg.c" || die "building readahead_memcg failed"
  : > "$lsd/empty-plan.txt"
  results=$lab/results-7.x-lockstat
  mkdir -p "$results"
  rc=0
  for c in "${cells[@]}"; do
    v=${c%%:*} fs=${c#*:}
    rm -f "target/vm/logs/$kname-lockstat-$v-$fs.log" "$results/$kname-lockstat-$v-$fs.json"
    bash scripts/kernel-matrix.sh --no-build --thp madvise --count --timeout "$timeout_s" --append nokaslr \
      --kernel "$kname-lockstat-$v=$lsd/src-$v/arch/x86/boot/bzImage" --cell "$kname-lockstat-$v:$fs" \
      --plan "${lsd#"$repo"/}/empty-plan.txt" --probe tests/vm/count/probe-lockstat.sh \
      --extra "${lsd#"$repo"/}/extra" --results "$results" || rc=1
    grep -a '^@@OUT readahead_memcg|' "target/vm/logs/$kname-lockstat-$v-$fs.log" | cut -d'|' -f3- |
      sed "s/^/$v:$fs: /" || rc=1
  done
  python3 tests/vm/count/counts.py readahead "$results"/*.json || rc=1
  exit $rc
fi
# A base build that was interrupted: the stock source restored, and the
# stock kernel made again (its image may be the base one).
if [ "$ser" = 6.12 ] && [ -s "$lab/src-stock/.lab-base-applied" ]; then
  say "restoring the stock tree after an interrupted base build"
  # shellcheck disable=SC2046 # the file list, split on purpose
  (cd "$lab/src-stock" && git checkout -q -f HEAD -- $(cat .lab-base-applied)) || die "restoring the stock tree failed"
  rm -f "$lab/src-stock/.lab-base-applied" "$lab/src-stock/.lab-built"
fi
# --- --package --arch arm64: cross-built packages, in trees of their own ---
# arm64's defconfig builds the drivers of dozens of SoCs, far too many for
# the lab's two cores; the lab's arm64 kernels start from it with every ARCH_* platform of
# arch/arm64/Kconfig.platforms off and kernel/arm64-lab.config (no modules;
# the virt machine's PCI, virtio and PL011) merged over kvm_guest.config and
# kernel/lab.config, so the series' options are x86-64's. Built in place in
# target/kernel-lab/arm64/src-7.x-stock and src-7.x-patched (the x86-64
# trees are not touched): stock unpacked, patched a copy of the built stock
# tree with the series applied (what it touches recompiles: with its
# changes to pgtable.h and pagemap.h, most of the kernel). make
# bindeb-pkg builds what is out of date, then packages it; dpkg-buildpackage
# writes into arm64/, whence the packages go to packages/.
a64=$lab/arm64
a64_make() { nice -n 19 make -j"$jobs" ARCH=arm64 CROSS_COMPILE=aarch64-linux-gnu- "$@"; }
a64_state() { # VARIANT -> the source and the series' changes (not their messages)
  if [ "$1" = patched ]; then
    echo "$(basename "$tb") $(for p in "${series[@]}"; do sed -n '/^diff --git /,$p' "$p" | grep -v '^index '; done | sha256sum | cut -c1-16)"
  else
    echo "$(basename "$tb") pristine"
  fi
}
a64_configure() { # TREE
  (
    cd "$1"
    [ -f .config ] && cp -p .config .config.lab-old
    grep -o '^config ARCH_[A-Z0-9_]*' arch/arm64/Kconfig.platforms |
      sed 's/^config \(.*\)/# CONFIG_\1 is not set/' > .platforms-off.config
    a64_make -s defconfig > /dev/null
    ARCH=arm64 CROSS_COMPILE=aarch64-linux-gnu- scripts/kconfig/merge_config.sh -m .config kernel/configs/kvm_guest.config \
      "$repo/kernel/lab.config" "$repo/kernel/arm64-lab.config" .platforms-off.config > .merge.log 2>&1 ||
      { cat .merge.log >&2; exit 1; }
    a64_make -s olddefconfig > /dev/null
    if [ -f .config.lab-old ] && cmp -s .config .config.lab-old; then
      mv .config.lab-old .config
    else
      rm -f .config.lab-old
    fi
    for o in TRANSPARENT_HUGEPAGE EXT4_FS XFS_FS BLK_DEV_LOOP VIRTIO_BLK VIRTIO_PCI PCI_HOST_GENERIC PROC_PAGE_MONITOR DEVTMPFS \
      SERIAL_AMBA_PL011_CONSOLE KUNIT DEBUG_VM; do
      grep -q "^CONFIG_$o=y" .config || { echo "kernel-lab: CONFIG_$o is not built in" >&2; exit 1; }
    done
  ) || die "configuring $1 for arm64 failed"
}
a64_package() { # VARIANT -> its arm64 packages in packages/
  local v=$1 tree=$a64/src-$pre$1 log t0 secs kind="make in the built tree (what is out of date)" debs
  t0=$(date +%s)
  if [ "$(cat "$tree/.lab-state" 2> /dev/null)" != "$(a64_state "$v")" ]; then
    if [ "$v" = patched ] && [ -s "$a64/src-${pre}stock/arch/arm64/boot/Image" ]; then
      say "copying the built arm64 stock tree to ${tree#"$repo"/}, the series applied"
      # shellcheck disable=SC2015 # die when any of the three steps fails
      rm -rf "$tree" "$tree.tmp" && cp -a "$a64/src-${pre}stock" "$tree.tmp" && mv "$tree.tmp" "$tree" ||
        die "copying to ${tree#"$repo"/} failed (disk full?)"
      kind="the built stock tree copied, the series applied: what it touches recompiled"
    else
      say "unpacking $(basename "$tb") into ${tree#"$repo"/}"
      mkdir -p "$a64"
      unpack "$tb" "$tree"
      kind="clean build"
    fi
    if [ "$v" = patched ]; then
      # patch(1): inside this repository's work tree, git apply would skip
      # every path (they are outside the directory it runs in)
      (cd "$tree" && for p in "${series[@]}"; do patch -p1 -s -N < "$p" || exit 1; done) > "$a64/am.log" 2>&1 ||
        die "the series does not apply to ${tree#"$repo"/}: $(head -n 1 "$a64/am.log")"
    fi
    a64_state "$v" > "$tree/.lab-state"
  fi
  a64_configure "$tree"
  log=$a64/package-$pre$v.log
  say "building and packaging the arm64 $v kernel (nice make -j$jobs ARCH=arm64 bindeb-pkg LOCALVERSION=-ht-$v), log: ${log#"$repo"/}"
  rm -f "$a64"/*.deb "$a64"/*.buildinfo "$a64"/*.changes
  # No modules, so no linux-headers package (and no arm64 libssl-dev for its tools).
  (cd "$tree" && a64_make bindeb-pkg LOCALVERSION="-ht-$v" DPKG_FLAGS=-Ppkg.linux-upstream.nokernelheaders > "$log" 2>&1) ||
    die "building or packaging the arm64 $v kernel failed: $(first_error "$log") (see ${log#"$repo"/})"
  debs=("$a64"/*.deb)
  [ -e "${debs[0]}" ] || die "make bindeb-pkg wrote no package for the arm64 $v kernel (see ${log#"$repo"/})"
  mkdir -p "$pk"
  # this variant's earlier arm64 packages are replaced
  rm -f "$pk"/*-ht-"$v"_*_arm64.deb "$pk"/linux-libc-dev_*-ht-"$v"_arm64.deb
  for d in "${debs[@]}"; do
    case ${d##*/} in
      # both variants' linux-libc-dev have the same name: the variant added
      linux-libc-dev_*) mv "$d" "$pk/$(basename "$d" _arm64.deb)-ht-${v}_arm64.deb" ;;
      *) mv "$d" "$pk"/ ;;
    esac
  done
  rm -f "$a64"/*.buildinfo "$a64"/*.changes
  secs=$(( $(date +%s) - t0 ))
  echo "{\"series\":\"$ser\",\"variant\":\"arm64-$v\",\"kind\":\"$kind, make bindeb-pkg\",\"seconds\":$secs,\"date\":\"$(date -u +%FT%TZ)\",\"jobs\":$jobs}" >> "$lab/build-times.jsonl"
  say "arm64 $v kernel built and packaged in $secs s"
}
if [ $package = 1 ] && [ "$arch" != x86_64 ]; then
  for t in aarch64-linux-gnu-gcc rsync dh dpkg-buildpackage; do
    command -v "$t" > /dev/null 2>&1 || die "'$t' not found (make ARCH=arm64 bindeb-pkg needs it): run scripts/install-deps.sh"
  done
  pk=$lab/packages
  a64_package stock
  a64_package patched
  if [ "$arch" = arm64 ]; then
    say "packages in ${pk#"$repo"/}:"
    (cd "$pk" && ls -l -- *_arm64.deb) >&2
    exit 0
  fi
fi
# Build what the cells boot (--build-only: both); the tree that is built
# already first, so the other is derived from it.
want=" ${cells[*]} "
{ [ $build_only = 1 ] || [ $package = 1 ]; } && want=" stock: patched: "
order=(stock patched)
built_tree patched && ! built_tree stock && order=(patched stock)
variants=()
# (the base kernel is made in the built stock tree)
[[ $want == *" base:"* ]] && [[ $want != *" stock:"* ]] && ! built_tree stock && want="$want stock: "
for v in "${order[@]}"; do
  [[ $want == *" $v:"* ]] || continue
  build "$v"
  [[ " ${cells[*]} " == *" $v:"* ]] || [ $build_only = 1 ] || [ $package = 1 ] || continue
  variants+=("$v")
done
if [[ $want == *" base:"* ]]; then
  build_base
  variants+=(base)
fi
for v in "${variants[@]}"; do
  say "$ser $v kernel: $(stat -c %s "$(image_of "$v")") bytes"
done
say "builds took $(( $(date +%s) - t_all )) s"
[ $build_only = 1 ] && exit 0

# --- installable packages of both kernels (make bindeb-pkg) ----------------
# In each built tree, with LOCALVERSION naming the variant: only what
# depends on the release string is rebuilt, then linked and packaged
# (linux-image, linux-libc-dev; linux-headers where the configuration has
# modules). dpkg-buildpackage writes into the tree's parent directory; the
# packages are moved to packages/.
if [ $package = 1 ]; then
  for t in rsync dh dpkg-buildpackage; do
    command -v "$t" > /dev/null 2>&1 || die "'$t' not found (make bindeb-pkg needs it): run scripts/install-deps.sh"
  done
  pk=$lab/packages
  mkdir -p "$pk"
  for v in "${variants[@]}"; do
    tree=$lab/src-$pre$v
    log=$lab/package-$pre$v.log
    t0=$(date +%s)
    say "packaging the $v kernel (nice make -j$jobs bindeb-pkg LOCALVERSION=-ht-$v), log: ${log#"$repo"/}"
    rm -f "$lab"/*.deb "$lab"/*.buildinfo "$lab"/*.changes
    (cd "$tree" && nice -n 5 make -j"$jobs" bindeb-pkg LOCALVERSION="-ht-$v" > "$log" 2>&1) ||
      die "packaging the $v kernel failed: $(first_error "$log") (see ${log#"$repo"/})"
    debs=("$lab"/*.deb)
    [ -e "${debs[0]}" ] || die "make bindeb-pkg wrote no package for the $v kernel (see ${log#"$repo"/})"
    # this variant's earlier packages are replaced
    rm -f "$pk"/*-ht-"$v"_*_amd64.deb "$pk"/*-ht-"$v"-*_amd64.deb
    mv "$lab"/*.deb "$pk"/
    rm -f "$lab"/*.buildinfo "$lab"/*.changes
    say "$v kernel packaged in $(( $(date +%s) - t0 )) s"
  done
  say "packages in ${pk#"$repo"/}:"
  (cd "$pk" && ls -l -- *.deb) >&2
  exit 0
fi

# --- the guest payload: hugetext, the fixtures, the lab helper, a real program
[ "$(id -u)" -eq 0 ] || die "booting needs root (mkfs, loop devices)"
export PATH="$HOME/.cargo/bin:$PATH"
command -v cargo > /dev/null 2>&1 || die "cargo not found: run scripts/install-deps.sh"
say "building hugetext and the fixtures"
cargo build --release --workspace --locked >&2
bash tests/fixtures/mkfixtures.sh target/fixtures >&2
bash tests/fixtures/mkctests.sh target/ctests target/release target/fixtures >&2
extra=$lab/extra
rm -rf "$extra" && mkdir -p "$extra"
gcc -O2 -Wall -o "$extra/labmap" tests/vm/lab/labmap.c || die "building tests/vm/lab/labmap.c failed"
cp tests/vm/lab/ready.js "$extra/"
if node=$(command -v node 2> /dev/null); then
  cp "$(readlink -f "$node")" "$extra/node"
else
  say "no node on this machine: the real-program row is left out"
fi
# The selftests the guests run (tests/vm/lab-probe.sh), built from the
# patched tree, which has the series' new ones; the stock kernel runs the
# same binaries. Static, but for load_address_pmd, a PIE that must be
# loaded by ld.so (its test is where the kernel places it).
build_selftests() {
  local tree=$lab/src-${pre}patched st=$extra/selftests log=$lab/selftests-$ser.log t
  if [ "$(cat "$tree/.lab-state" 2> /dev/null)" != "$(state_of patched)" ]; then
    say "no patched $ser tree with this series: the guests run no selftests (boot a patched cell once)"
    return 0
  fi
  mkdir -p "$st/mm" "$st/exec"
  t=$(date +%s)
  (
    set -e
    cd "$tree"
    make -s headers
    # -DKSFT_SKIP=4: 6.12.117's khugepaged.c uses KSFT_SKIP without
    # including kselftest.h (a stable backport); the same definition as
    # kselftest.h's, so the other tests are unchanged.
    make -C tools/testing/selftests/mm OUTPUT="$st/mm" EXTRA_CFLAGS="-static -DKSFT_SKIP=4" \
      "$st/mm/exec_folios" "$st/mm/soft-dirty" "$st/mm/mkdirty" "$st/mm/cow" \
      "$st/mm/uffd-unit-tests" "$st/mm/khugepaged"
    make -C tools/testing/selftests/exec OUTPUT="$st/exec" "$st/exec/load_address_pmd"
    # readahead into a memory cgroup at its limit, where the series has it (7.x)
    if grep -q readahead_memcg tools/testing/selftests/mm/Makefile; then
      make -C tools/testing/selftests/mm OUTPUT="$st/mm" EXTRA_CFLAGS="-static" "$st/mm/readahead_memcg"
    fi
    # the static-PIE twin, where the series' Makefile has it (7.x)
    if grep -q load_address_pmd_static tools/testing/selftests/exec/Makefile; then
      make -C tools/testing/selftests/exec OUTPUT="$st/exec" "$st/exec/load_address_pmd_static"
    fi
  ) > "$log" 2>&1 || die "building the $ser selftests failed: $(first_error "$log") (see ${log#"$repo"/})"
  say "selftests built from the patched $ser tree in $(( $(date +%s) - t )) s"
}
[ $bench = 1 ] || build_selftests

# --- boot each cell with the kernel-matrix harness --------------------------
mcells=()
for c in "${cells[@]}"; do mcells+=(--cell "$kname-$c"); done
results=$lab/results${pre:+-$ser}
append=
# A THP mode other than the default is for the kernel's own tests, which
# must skip what that mode turns off: the guests run only KUnit and the
# selftests (LAB_PART=selftests), and the results stay apart from the
# record's.
if [ "$thp" != always ] && [ $bench = 0 ]; then
  results=$results-thp-${thp//[^a-z,]/}
  append=LAB_PART=selftests
fi
[ $bench = 1 ] && results=$lab/results-bench && append=LAB_PART=bench
mkdir -p "$results"
# This run's cells start without console logs or results, so that a harness
# that stops before booting can never leave an earlier run's to be read.
for c in "${cells[@]}"; do
  rm -f "target/vm/logs/$kname-${c/:/-}.log" "$results/$kname-${c/:/-}.json" "$results/$kname-${c/:/-}.lab.json"
done
set +e
kernels=()
for v in "${variants[@]}"; do kernels+=(--kernel "$kname-$v=$(image_of "$v")"); done
# --retry-hung: a guest that hung or whose kernel died before /init is
# booted once more (a measurement that ran is never repeated).
bash scripts/kernel-matrix.sh --no-build --retry-hung --thp "$thp" --timeout "$timeout_s" "${kernels[@]}" \
  "${mcells[@]}" --plan tests/vm/lab/plan.txt --probe tests/vm/lab-probe.sh \
  --extra "${extra#"$repo"/}" --results "$results" --append "$append"
rc=$?
set -e
case $rc in
  0|1) ;;
  2) die "the harness (scripts/kernel-matrix.sh) stopped before the guests ran (its line above says why)" ;;
  *) die "the harness (scripts/kernel-matrix.sh) stopped with status $rc" ;;
esac
booted=0
for c in "${cells[@]}"; do
  log=target/vm/logs/$kname-${c/:/-}.log
  if ! grep -aq '@@HT {"kind":"boot"' "$log" 2> /dev/null; then
    say "$c: the guest did not boot (no boot line from its init in $log)"
    rc=1
    continue
  fi
  booted=$((booted + 1))
  python3 tests/vm/lab.py collect "$log" "$results/$kname-${c/:/-}.json" \
    > "$results/$kname-${c/:/-}.lab.json" || rc=1
done
[ $booted -gt 0 ] || die "no guest booted (status $rc from scripts/kernel-matrix.sh)"
if [ $bench = 1 ]; then
  python3 tests/vm/lab.py benches "$results"/*.lab.json || rc=1
else
  python3 tests/vm/lab.py check "$results"/*.lab.json || rc=1
fi
if [ $write_doc = 1 ]; then
  benches=("$lab"/results-bench/*.lab.json)
  [ -e "${benches[0]}" ] || benches=()
  # Both series: each one's last exec run (a series not booted yet has none);
  # 7.x's last boots under THP madvise and never (their own tables) and its
  # selftests on arm64 with 16 KiB pages (tests/vm/arm64-selftests.sh).
  labs=()
  for f in "$lab"/results/*.lab.json "$lab"/results-7.x/*.lab.json "$lab"/results-7.x-thp-*/*.lab.json \
    "$lab"/results-7.x-arm64-16k/*.json; do [ -e "$f" ] && labs+=("$f"); done
  python3 tests/vm/lab.py doc "$lab/build-times.jsonl" "${labs[@]}" "${benches[@]}"
  say "wrote doc/kernel.md and doc/kernel.json"
fi
exit $rc
