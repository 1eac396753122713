#!/usr/bin/env bash
# One series of the CI check of scripts/kernel-lab.sh --check:
#
#   scripts/lib/kernel-check.sh NAME TARBALL SERIES_DIR [TREE]
#
# The series (SERIES_DIR/*.patch) applies to the pristine source of TARBALL
# (git apply --check, patch by patch), is clean under that tree's
# scripts/checkpatch.pl --strict, adds no scripts/kernel-doc warning to a
# kernel file it changes, the C files it changes (with its KUnit tests:
# kernel/check.config) compile with -Werror for x86-64 and, with Debian's
# cross compilers, for arm64, ppc64el, s390x and riscv64 (each from its
# defconfig plus kernel/check.config), and the selftests it changes compile.
#
# Cached in target/kernel-lab/check/: TREE/ (default NAME) is a git
# repository of the pristine source (tag pristine), built out of tree in
# TREE-x86_64/ and TREE-arm64/, so a later check recompiles only what the
# series changes (TREE-ppc64el/, TREE-s390x/, TREE-riscv64/ alike); a series already checked against this source is not
# applied again.  Two series can share one TREE (a patch posted alone and
# the series it opens): each check then re-applies its own.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$(pwd)
name=$1 tb=$2 dir=$3 treename=${4:-$1}
lab=$repo/target/kernel-lab
check=$lab/check
tree=$check/$treename
jobs=$(nproc)

say() { echo "kernel-lab: $name: $*" >&2; }
die() { echo "kernel-lab: $name: $*" >&2; exit 2; }
first_error() { # LOG: the first compiler or make error in LOG
  grep -m 1 -E 'error:|Error [0-9]+|No rule to make target' "$1" | sed 's/^ *//' || tail -n 1 "$1"
}

series=("$repo/$dir"/*.patch)
[ -e "${series[0]}" ] || die "no patches in $dir/"
stamp=$( { basename "$tb"; cat "${series[@]}"; } | sha256sum | cut -c1-16)
kdoc_warnings() { # FILE SHOWN-AS: scripts/kernel-doc's warnings, without line numbers
  (cd "$tree" && scripts/kernel-doc -none "$1" 2>&1 | sed -e "s#$1#$2#g" -e 's#:[0-9][0-9]*[: ]# #' | LC_ALL=C sort)
}
mkdir -p "$check"

# --- the pristine tree, unpacked once per source package -------------------
if [ "$(cat "$tree/.check-source" 2> /dev/null)" != "$(basename "$tb")" ]; then
  say "unpacking $(basename "$tb" .tar.xz) into ${tree#"$repo"/}"
  rm -rf "$tree" "$tree.tmp" "$tree"-x86_64 "$tree"-arm64 "$tree"-ppc64el "$tree"-s390x "$tree"-riscv64 && mkdir -p "$tree.tmp"
  tar -xf "$tb" -C "$tree.tmp" || die "unpacking $tb failed"
  mv "$tree.tmp"/linux-source-* "$tree" && rmdir "$tree.tmp"
  # A repository of its own: git apply inside another repository's work
  # tree would take paths relative to that one and skip the rest silently.
  (cd "$tree" && git init -q && git add -A -f &&
    git -c user.name=kernel-lab -c user.email=kernel-lab@localhost commit -q -m pristine &&
    git tag pristine) || die "git init of ${tree#"$repo"/} failed"
  basename "$tb" > "$tree/.check-source"
fi

# --- apply and style: on the pristine source, unless already done ----------
if [ "$(cat "$tree/.check-series" 2> /dev/null)" != "$stamp" ]; then
  rm -f "$tree/.check-series"
  # Back to pristine: changed files restored, files the series added removed
  # (-x: the top-level .gitignore ignores everything new; the objects are
  # out of tree; files that do not change keep their times).
  (cd "$tree" && git checkout -q -f pristine && git clean -q -f -d -x -e /.check-source) ||
    die "resetting ${tree#"$repo"/} to the pristine source failed"
  for p in "${series[@]}"; do
    (cd "$tree" && git apply --check "$p") 2> "$check/$name-apply.log" ||
      die "$(basename "$p") does not apply to $(basename "$tb" .tar.xz): $(head -n 1 "$check/$name-apply.log")"
    (cd "$tree" && git apply "$p")
  done
  say "the series (${#series[@]} patches) applies to $(basename "$tb" .tar.xz)"
  for p in "${series[@]}"; do
    # The packaged source has no git history: the commit ids of Fixes:
    # tags cannot be looked up in it (UNKNOWN_COMMIT_ID).
    (cd "$tree" && perl scripts/checkpatch.pl --strict -q --no-tree --ignore UNKNOWN_COMMIT_ID "$p") > "$check/$name-style.log" 2>&1 ||
      die "$(basename "$p") is not clean under the tree's scripts/checkpatch.pl --strict: $(grep -m 1 -E '^(ERROR|WARNING|CHECK)' "$check/$name-style.log" || head -n 1 "$check/$name-style.log")"
  done
  say "scripts/checkpatch.pl --strict: no errors, warnings or checks"
  # kernel-doc: no warning that the pristine file does not have already.
  kfiles=$(cat "${series[@]}" | sed -n 's#^+++ b/\(.*\.[ch]\)$#\1#p' | grep -v "^tools/" | sort -u || true)
  for f in $kfiles; do
    (cd "$tree" && git show "pristine:$f" > "$check/$name-kdoc.pristine" 2> /dev/null) || : > "$check/$name-kdoc.pristine"
    new=$(LC_ALL=C comm -13 <(kdoc_warnings "$check/$name-kdoc.pristine" "$f") <(kdoc_warnings "$f" "$f"))
    [ -z "$new" ] || die "the series adds scripts/kernel-doc warnings to $f: $(head -n 1 <<< "$new")"
  done
  rm -f "$check/$name-kdoc.pristine"
  say "scripts/kernel-doc: no new warnings in $(wc -w <<< "$kfiles") files"
  echo "$stamp" > "$tree/.check-series"
else
  say "the series was applied and checked against this source already"
fi

# --- compile: per architecture, out of tree ---------------------------------
arches=(x86_64 arm64 ppc64el s390x riscv64)
make_args() { # ARCH -> the make arguments that select it (cross compilers)
  case $1 in
    arm64) echo ARCH=arm64 CROSS_COMPILE=aarch64-linux-gnu- ;;
    ppc64el) echo ARCH=powerpc CROSS_COMPILE=powerpc64le-linux-gnu- ;;
    s390x) echo ARCH=s390 CROSS_COMPILE=s390x-linux-gnu- ;;
    riscv64) echo ARCH=riscv CROSS_COMPILE=riscv64-linux-gnu- ;;
  esac
}
defconfig() { # ARCH -> its defconfig target (ppc64el: little-endian 64-bit)
  if [ "$1" = ppc64el ]; then echo ppc64le_defconfig; else echo defconfig; fi
}
configure() { # ARCH OUT: configure OUT when its inputs changed
  local arch=$1 out=$2 key make_arch
  read -r -a make_arch <<< "$(make_args "$arch")"
  key=$(cat "$repo/kernel/lab.config" "$repo/kernel/check.config" "$tree/.check-series" | sha256sum | cut -c1-16)
  [ "$(cat "$out/.check-config" 2> /dev/null)" = "$key" ] && return 0
  mkdir -p "$out"
  (
    cd "$tree"
    if [ "$arch" = x86_64 ]; then
      make -s O="$out" x86_64_defconfig > /dev/null
      frags=(kernel/configs/kvm_guest.config "$repo/kernel/lab.config" "$repo/kernel/check.config")
    else
      make -s "${make_arch[@]}" O="$out" "$(defconfig "$arch")" > /dev/null
      frags=("$repo/kernel/check.config")
    fi
    scripts/kconfig/merge_config.sh -m -O "$out" "$out/.config" "${frags[@]}" > "$out/merge.log" 2>&1 ||
      { cat "$out/merge.log" >&2; exit 1; }
    make -s "${make_arch[@]}" O="$out" olddefconfig > /dev/null
  ) || die "configuring ${out#"$repo"/} failed"
  # Every option of kernel/check.config that this source (with the series)
  # defines is set; a series without KUnit tests of its own has fewer.
  # config option names: one word each
  # shellcheck disable=SC2013
  for o in $(sed -n 's/^\(CONFIG_[A-Z0-9_]*\)=y$/\1/p' "$repo/kernel/check.config"); do
    grep -rqsx --include='Kconfig*' "config ${o#CONFIG_}" "$tree" || continue
    grep -q "^$o=y" "$out/.config" || die "$arch: $o is not set in ${out#"$repo"/}/.config"
  done
  echo "$key" > "$out/.check-config"
}

# The kernel C files the series changes, as objects: a KUnit file under
# fs/tests/ is #included by the loader it tests; the 32-bit ELF loader
# includes binfmt_elf.c; a changed header brings the objects that use what
# the series changes in it (include/linux/pgtable.h: the batched PTE
# helpers of mm/mprotect.c, mm/rmap.c and mm/memory.c).
objects() { # OUT -> the objects to build
  local objs
  objs=$(cat "${series[@]}" | sed -n 's#^+++ b/\(.*\)\.[ch]$#&#p' | sed 's#^+++ b/##' | grep -v '^tools/' |
    sed -e 's#^fs/tests/binfmt_elf_kunit\.c$#fs/binfmt_elf.c#' -e 's#^include/linux/pgtable\.h$#mm/mprotect.c mm/rmap.c mm/memory.c#' |
    tr ' ' '\n' | sed -n 's#\.c$#.o#p' | sort -u | tr '\n' ' ')
  grep -q 'fs/binfmt_elf.o' <<< "$objs" && grep -q '^CONFIG_COMPAT_BINFMT_ELF=y' "$1/.config" && objs="$objs fs/compat_binfmt_elf.o"
  echo "$objs"
}

for arch in "${arches[@]}"; do
  out=$tree-$arch
  read -r -a make_arch <<< "$(make_args "$arch")"
  t_arch=$(date +%s)
  configure "$arch" "$out"
  objs=$(objects "$out")
  say "$arch: compiling $objs"
  # shellcheck disable=SC2086 # one argument per object
  (cd "$tree" && nice -n 5 make -j"$jobs" "${make_arch[@]}" O="$out" KCFLAGS=-Werror $objs > "$check/$name-$arch.log" 2>&1) ||
    die "$arch: the patched files do not compile: $(first_error "$check/$name-$arch.log") (see ${check#"$repo"/}/$name-$arch.log)"
  say "$arch: compiled in $(( $(date +%s) - t_arch )) s"
done

# --- the selftests the series changes ---------------------------------------
tests=$(cat "${series[@]}" | sed -n 's#^+++ b/tools/testing/selftests/\(mm\|exec\)/\([^/]*\)\.c$#\1/\2#p' |
  { grep -v -E '/(vm_util|thp_settings|hugepage_settings)$' || true; } | sort -u)
for t in $tests; do
  sdir=${t%/*}
  mkdir -p "$tree-selftests/$sdir"
  (cd "$tree" && make -s -C "tools/testing/selftests/$sdir" OUTPUT="$tree-selftests/$sdir" \
    "$tree-selftests/$t" > "$check/$name-selftests.log" 2>&1) ||
    die "selftest $t does not compile: $(first_error "$check/$name-selftests.log") (see ${check#"$repo"/}/$name-selftests.log)"
done
# unquoted on purpose: the names on one line
# shellcheck disable=SC2086
[ -n "$tests" ] && say "selftests compiled: $(echo $tests | tr '\n' ' ')"
say "passed"
