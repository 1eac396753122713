#!/usr/bin/env bash
# The 7.x series' own selftests on Debian's arm64 kernel with 16 KiB pages
# (32 MiB PMD), where they must skip: `mm/exec_folios` (exec folios are
# capped at 2 MiB, so a PMD-order one is out of reach) and
# `exec/load_address_pmd` (the PMD size is not 2 MiB; and the kernel is
# stock 7.3, without the series). There is no 16 KiB build of the series
# here, and the kernel matrix's arm64 cells need the whole workspace
# cross-built; this boots the kernel package the matrix's 7.x-arm64-16k cell
# boots, with a root of its own: a static /init (arm64-selftests/init.c)
# and the two selftests cross-compiled (aarch64-linux-gnu-gcc) from the
# patched 7.x lab tree's tools/testing/selftests, nothing else.
#
#   tests/vm/arm64-selftests.sh [--thp MODE] [--timeout SECONDS]
#                               [--kernel NAME=IMAGE]
#
#   --thp MODE        transparent_hugepage= on the guest's command line
#                     (default always: the mode in which the tests get
#                     furthest before the page size stops them)
#   --timeout SECONDS for the guest (default 1800; TCG)
#   --kernel NAME=IMAGE  boot this arm64 kernel image instead (e.g. the
#                     /boot/vmlinuz-* of a package of scripts/kernel-lab.sh
#                     --package --arch arm64: 4 KiB pages, where the tests
#                     run rather than skip); results in
#                     target/kernel-lab/results-7.x-arm64-lab/ (the 16 KiB
#                     record is not touched), its KUnit lines in the console
#
# Needs target/kernel-lab/src-7.x-patched (scripts/kernel-lab.sh --series
# 7.x builds it), aarch64-linux-gnu-gcc, qemu-system-aarch64, cpio, and,
# without --kernel, the network once (apt-get download of the kernel, as
# scripts/kernel-matrix.sh).
# Writes target/kernel-lab/results-7.x-arm64-16k/KERNEL-thp-MODE.log (the
# console) and .json (each test's TAP lines, pass/fail/skip counts and skip
# reasons); prints the TAP lines. Exit status: 0 when no test failed, 1
# when one failed or the guest did not finish, 2 for bad usage or a
# missing tool.
set -euo pipefail
cd "$(dirname "$0")/../.."
repo=$(pwd)

die() { echo "arm64-selftests: $*" >&2; exit 2; }
say() { echo "arm64-selftests: $*" >&2; }

thp=always
timeout_s=1800
kopt=
while [ $# -gt 0 ]; do
  case $1 in
    --thp) shift; case ${1:-} in always|madvise|never) thp=$1 ;; *) die "--thp takes always, madvise or never" ;; esac ;;
    --timeout) shift; [[ ${1:-} =~ ^[1-9][0-9]*$ ]] || die "--timeout needs seconds"; timeout_s=$1 ;;
    --kernel) shift; [[ ${1:-} =~ ^[A-Za-z0-9._-]+=.+ ]] || die "--kernel needs NAME=IMAGE"; kopt=$1 ;;
    -h|--help) sed -n '2,35p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  shift
done
for t in aarch64-linux-gnu-gcc qemu-system-aarch64 cpio gzip dpkg-deb apt-get python3 timeout; do
  command -v "$t" > /dev/null 2>&1 || die "'$t' not found: run scripts/install-deps.sh"
done
tree=$repo/target/kernel-lab/src-7.x-patched
st=$tree/tools/testing/selftests
if [ ! -s "$st/mm/exec_folios.c" ] || [ ! -s "$st/exec/load_address_pmd.c" ]; then
  die "no patched 7.x tree with the series' selftests (scripts/kernel-lab.sh --series 7.x --build-only)"
fi

vm=$repo/target/vm
work=$vm/arm64-selftests
results=$repo/target/kernel-lab/results-7.x-arm64-16k
mkdir -p "$vm/cache" "$vm/kernels" "$results"
rm -rf "$work" && mkdir -p "$work/root/selftests" "$work/root/proc" "$work/root/sys" \
  "$work/root/lib/aarch64-linux-gnu" "$work/root/tmp"

# --- the kernel: the one given, or the newest Debian 7.x arm64-16k, fetched
# as the matrix does
if [ -n "$kopt" ]; then
  kname=${kopt%%=*} kimg=${kopt#*=}
  [ -s "$kimg" ] || die "no kernel image $kimg"
  results=$repo/target/kernel-lab/results-7.x-arm64-lab
  mkdir -p "$results"
else
  aptd=$vm/apt
  # shellcheck source=scripts/lib/debian-apt.sh
  . scripts/lib/debian-apt.sh
  debian_apt_ready
  pkg=$(debian_apt_cache pkgnames linux-image- 2> /dev/null |
    grep -E '^linux-image-7\.[0-9]+\.[0-9]+\+deb[0-9]+-arm64-16k$' | sort -V | tail -n 1 || true)
  [ -n "$pkg" ] || die "apt knows no linux-image-7.*-arm64-16k (target/vm/apt/sources.list)"
  kdir=$vm/kernels/$pkg
  if [ ! -e "$kdir/.done" ]; then
    # Since 7.x the kernel itself is in linux-binary-ABI; no modules needed.
    bin=linux-binary-${pkg#linux-image-}
    say "fetching $bin"
    ( cd "$vm/cache" && debian_apt download -q "$bin:arm64" > /dev/null 2>&1 ) ||
      die "apt-get download $bin failed (no network or no such package)"
    rm -rf "$kdir" && mkdir -p "$kdir"
    # shellcheck disable=SC2012
    dpkg-deb -x "$(ls -t "$vm/cache/${bin}"_*.deb | head -n 1)" "$kdir"
    touch "$kdir/.done"
  fi
  kimg=$(find "$kdir" -name vmlinuz -path '*/modules/*' | head -n 1)
  [ -n "$kimg" ] || die "no vmlinuz in $kdir"
  kname=${pkg#linux-image-}
fi

# --- the guest's root: /init and the selftests, cross-compiled --------------
cc=aarch64-linux-gnu-gcc
log=$work/build.log
(
  set -e
  $cc -static -O2 -Wall -o "$work/root/init" tests/vm/arm64-selftests/init.c
  cd "$st/mm"
  # The uapi headers are the cross toolchain's (linux-libc-dev-arm64-cross):
  # the lab tree is configured for x86-64 and is not touched.
  $cc -static -O2 -Wall -I "$tree" -I "$tree/tools/include/uapi" -I .. -U_FORTIFY_SOURCE \
    exec_folios.c vm_util.c hugepage_settings.c -o "$work/root/selftests/exec_folios"
  cd "$st/exec"
  # As the selftest's Makefile builds them: a PIE loaded by ld.so (its libc
  # goes into the root) and its static-PIE twin.
  $cc -O2 -Wall -Wl,-z,max-page-size=0x10000 -Wl,-z,separate-code -fPIE -pie \
    load_address_pmd.c -o "$work/root/selftests/load_address_pmd"
  $cc -O2 -Wall -Wl,-z,max-page-size=0x10000 -Wl,-z,separate-code -fPIE -static-pie \
    load_address_pmd.c -o "$work/root/selftests/load_address_pmd_static"
) > "$log" 2>&1 || die "cross-compiling the selftests failed (see ${log#"$repo"/})"
sysroot=/usr/aarch64-linux-gnu/lib
for f in ld-linux-aarch64.so.1 libc.so.6; do
  [ -e "$sysroot/$f" ] || die "no $sysroot/$f (libc6-dev-arm64-cross)"
  cp -L "$sysroot/$f" "$work/root/lib/aarch64-linux-gnu/$f"
done
ln -s aarch64-linux-gnu/ld-linux-aarch64.so.1 "$work/root/lib/ld-linux-aarch64.so.1"
printf '%s\n' exec_folios load_address_pmd > "$work/root/selftests/list"
(cd "$work/root" && find . | cpio -o -H newc --quiet) | gzip -1 > "$work/root.cpio.gz"

# --- boot ---------------------------------------------------------------------
out=$results/$kname-thp-$thp
say "booting $kname (THP $thp, TCG; up to $timeout_s s)"
t0=$(date +%s)
set +e
# the commas belong to the -cpu value
# shellcheck disable=SC2054
timeout -s KILL "$timeout_s" qemu-system-aarch64 -M virt -accel tcg -cpu max,pauth-impdef=on \
  -smp 2 -m 2G -nographic -no-reboot -kernel "$kimg" -initrd "$work/root.cpio.gz" \
  -append "console=ttyAMA0 panic=-1 transparent_hugepage=$thp" < /dev/null > "$out.log" 2>&1
qrc=$?
set -e
say "guest finished in $(($(date +%s) - t0)) s (qemu status $qrc); console: ${out#"$repo"/}.log"
python3 - "$out.log" "$out.json" "$kname" "$thp" <<'EOF'
import json, re, sys
log, dest, kname, thp = sys.argv[1:]
text = open(log, errors="replace").read().replace("\r", "")
info = dict(m.groups() for m in re.finditer(r"^@@INFO (\S+) (.*)$", text, re.M))
tests = {}
for m in re.finditer(r"^@@TAP ([^|]+)\|(.*)$", text, re.M):
    t = tests.setdefault(m[1], {"tap": [], "pass": 0, "fail": 0, "skip": 0, "skipped": []})
    line = m[2]
    t["tap"].append(line)
    if re.match(r"^ok \d+ .*# SKIP", line) or line.startswith("# SKIP") or re.match(r"^1\.\.0 # SKIP", line):
        t["skip"] += 1
        t["skipped"].append(re.sub(r"^.*?# SKIP\s*", "", line))
    elif line.startswith("ok "):
        t["pass"] += 1
    elif line.startswith("not ok "):
        t["fail"] += 1
for m in re.finditer(r"^@@RC (\S+) (-?\d+)$", text, re.M):
    tests.setdefault(m[1], {"tap": [], "pass": 0, "fail": 0, "skip": 0, "skipped": []})["rc"] = int(m[2])
done = "@@DONE" in text
rec = {"kind": "arm64-selftests", "kernel": kname, "thp_cmdline": thp, "info": info, "finished": done, "tests": tests}
json.dump(rec, open(dest, "w"), indent=1, sort_keys=True)
bad = not done
for name, t in sorted(tests.items()):
    for line in t["tap"]:
        print(f"{name}| {line}")
    # kselftest: 0 pass, 4 skip; anything else (1 fail, a signal) is a failure
    if t["fail"] or t.get("rc") not in (0, 4):
        bad = True
print(f"page size {info.get('page_size')}, PMD {info.get('hpage_pmd_size')}, THP {info.get('thp')}, "
      f"{'finished' if done else 'DID NOT FINISH'}")
sys.exit(1 if bad else 0)
EOF
