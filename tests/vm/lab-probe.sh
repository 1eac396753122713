#!/bin/sh
# The kernel lab's probe (scripts/kernel-lab.sh): run inside a guest of the
# kernel-matrix harness, from the repository root on the disk under test,
# once per THP mode (arguments: the mode and the capabilities).
#
# For each fixture (the bfd/lld/mold 20 MiB-text PIEs, a bfd program with a
# 20 MiB-text shared library, and a real program) it measures, on a fresh,
# evicted copy each time:
#   plain  the program exec'd with no hugetext step
#   align  `hugetext align`, then a plain exec of the aligned file
#   warm   `hugetext warm` of the (aligned) file, then a plain exec
#   run    `hugetext run` of the original file
# and, on a patched kernel, the plain exec once per setting of the patches:
# where they have sysctls (6.12; the 7.x series' first form, whose records
# the lab still reads), off = all 0, the defaults; on = exec folios at PMD
# order, the 2 MiB THP readahead cap, vm.elf_pmd_align=1; congruent =
# vm.elf_pmd_align=2. The 7.x series follows THP policy and has no switch
# of its own: off = THP `madvise` (nothing advised, so the patches do
# nothing), on = THP `always`; the MADV_HUGEPAGE route is what the
# hugetext steps measure.
# Then the guard: ET_EXEC programs, PIEs whose segments are not eligible,
# non-exec and writable mappings, with address randomisation off, under
# every setting (tests/vm/lab.py checks that nothing moved or changed size).
#
# Everything goes to the console: `@@LAB ID|line` (the output of one
# measurement, ID = setting/fixture/step/what) and `@@HT {json}` facts.
mode=$1
caps=$2   # the guest's capabilities, space-separated; "large-folios" among
          # them where the disk under test gives PMD-order folios
case " $caps " in *" large-folios "*) lf=1 ;; *) lf=0 ;; esac
# The cell's facts (HT_FS: the filesystem under test), which the guest's
# /init reads but does not export.
# Written into the guest image by scripts/kernel-matrix.sh.
# shellcheck source=/dev/null
[ -r /ht.env ] && . /ht.env
ht=$PWD/target/release/hugetext
# The preload's machine-readable record of each pass, which lab.py reads.
export HUGETEXT_REPORT=json
extra=$PWD/target/kernel-lab/extra
labmap=$extra/labmap
dir=$PWD/target/scratch/lab-$mode
rm -rf "$dir" && mkdir -p "$dir"

# Patched: a kernel with the series' sysctl (6.12, and the 7.x series'
# first form), or one whose built-in KUnit suites include the 7.x series'
# exec_folio suite, which only a kernel with the series has (read from
# debugfs, else from the kernel log).
thp_enabled=/sys/kernel/mm/transparent_hugepage/enabled
policy=0
patched_by_kunit() {
  [ -d /sys/kernel/debug/kunit ] || mount -t debugfs debugfs /sys/kernel/debug 2> /dev/null
  [ -d /sys/kernel/debug/kunit/exec_folio ] && return 0
  dmesg | grep -q '# Subtest: exec_folio$'
}
if [ -e /proc/sys/vm/exec_folio_order ]; then
  variant=patched
  settings="off on congruent"
  # The 7.x series' first form has no vm.elf_pmd_align: its alignment
  # follows exec folios, so "congruent" would repeat "on".
  [ -e /proc/sys/vm/elf_pmd_align ] || settings="off on"
elif patched_by_kunit; then
  variant=patched
  policy=1
  settings="off on"
else
  variant=stock
  settings=stock
  # A 7.x or 6.12 stock kernel: its plain execs under THP madvise ("off")
  # too, the mode the patched kernel's "off" runs in (both series switch
  # by THP policy), so that the guard compares the two under the same mode
  # (the rest runs under the boot's mode).
  case $(uname -r) in 7.* | 6.12.*) settings="off stock" ;; esac
  # The base kernel (scripts/kernel-lab.sh's base cells): stock with the
  # 6.12 series' mainline backports alone, which no observable tells from
  # stock: the cell's name says so. The guard's reference for the patched
  # kernel's "off"; it measures the plain execs and the guard only.
  case ${HT_CELL:-} in *-base:*) variant=base ;; esac
fi
# khugepaged collapses file text in the background under THP always on
# kernels without READ_ONLY_THP_FOR_FS (7.x: any large-folio filesystem), so
# what a plain exec's page cache holds would depend on when it last ran
# (7.3.4 xfs: node's text in 16 MiB of 2 MiB folios on one boot, none on
# another). The lab measures the fault path: khugepaged is parked (one scan
# an hour) for the measurements and given back its interval for the
# selftests.
khsleep=/sys/kernel/mm/transparent_hugepage/khugepaged/scan_sleep_millisecs
khsaved=$(cat "$khsleep" 2> /dev/null)
[ -n "$khsaved" ] && echo 3600000 > "$khsleep"
khrestore() { [ -n "$khsaved" ] && echo "$khsaved" > "$khsleep"; return 0; }
# The disk's readahead window. qemu's virtio disk reports an optimal I/O
# size from which the kernel sets 8 MiB; most disks get the kernel's
# default of 128 KiB (VM_READAHEAD_PAGES), which the lab measures with
# unless LAB_READ_AHEAD_KB says otherwise. It matters for exec folios: a
# fault in a program's non-executable segment (ELF headers, .rodata) reads
# around it by half the window on either side, and with 8 MiB that caches
# whole text windows in small folios before their first exec fault.
ra_kb=${LAB_READ_AHEAD_KB:-128}
for q in /sys/block/vd*/queue/read_ahead_kb; do [ -w "$q" ] && echo "$ra_kb" > "$q"; done
switch=sysctl
[ $policy = 1 ] && switch=thp
[ "$variant" != patched ] && switch=none
echo "@@HT {\"kind\":\"lab-guest\",\"variant\":\"$variant\",\"switch\":\"$switch\",\"thp\":\"$mode\",\"read_ahead_kb\":$ra_kb,\"release\":\"$(uname -r)\",\"uptime\":$(cut -d. -f1 /proc/uptime)}"

setting() { # NAME: set the patches' sysctls, or THP policy (boot: the cell's mode)
  if [ $policy = 1 ] || [ "$variant" != patched ]; then
    case $1 in
      off) echo madvise > "$thp_enabled" ;;
      on) echo always > "$thp_enabled" ;;
      *) echo "$mode" > "$thp_enabled" ;;
    esac
    return 0
  fi
  case $1 in
    off) v="0 0 0" ;;
    on) v="9 1 1" ;;
    congruent) v="9 1 2" ;;
    *) return 0 ;;
  esac
  # Only the switches this kernel has (the 7.x series has no
  # thp_readahead_cap or elf_pmd_align: its alignment follows exec folios).
  # split on purpose: the fields of the line
  # shellcheck disable=SC2086
  set -- $v
  [ -e /proc/sys/vm/exec_folio_order ] && echo "$1" > /proc/sys/vm/exec_folio_order
  [ -e /proc/sys/vm/thp_readahead_cap ] && echo "$2" > /proc/sys/vm/thp_readahead_cap
  [ -e /proc/sys/vm/elf_pmd_align ] && echo "$3" > /proc/sys/vm/elf_pmd_align
  return 0
}

. tests/vm/probe-lib.sh

# out ID CMD...: run CMD, its output as @@LAB lines, then its status.
out() {
  oid=$1; shift
  tagged "@@LAB $oid|" "$@"
  echo "@@LAB $oid|@rc $rc"
}

# outz ID CMD...: the same for JSON output, without its `"key": 0,` lines
# (the JSON stays valid; the console is slow under emulation).
outz() {
  oid=$1; shift
  "$@" > /tmp/lab.out 2>&1
  orc=$?
  grep -v '": 0,$' /tmp/lab.out | awk -v p="@@LAB $oid|" '{print p $0}'
  echo "@@LAB $oid|@rc $orc"
}

# evict FILE: drop FILE's page cache (POSIX_FADV_DONTNEED); where some of it
# stays cached, drop all clean page cache (the guest's own); report what
# is still cached then.
evict() {
  "$labmap" evict "$1" > /dev/null && return 0
  sync && echo 1 > /proc/sys/vm/drop_caches
  "$labmap" evict "$1" | sed 's/^/@@LAB warning|/'
}

# fresh DST SRC: a copy of SRC, written back and evicted from the page cache.
fresh() {
  rm -f "$1" && cp "$2" "$1" && sync && evict "$1"
}

pgpgin() { awk '/^pgpgin / {print $2}' /proc/vmstat; }

# measure ID FILE CMD...: start CMD (which prints "ready" once its text is
# touched and then waits for end of input), record the kB read from disk
# from exec to "ready" (pgpgin), the process's executable mappings
# (`hugetext inspect --json`), its maps, and FILE's page cache by folio size.
measure() {
  id=$1; file=$2; shift 2
  before=$(pgpgin)
  t0=$(date +%s)
  start_ready "$dir/wait.out" 1200 "$@"
  after=$(pgpgin)
  # `hugetext run` execs the program in place: the pid is the program's.
  echo "@@LAB $id/exec|pgpgin_kb $((after - before))"
  echo "@@LAB $id/exec|ready $(grep -c ready "$dir/wait.out")"
  echo "@@LAB $id/exec|seconds $(($(date +%s) - t0))"
  # The first 20 lines for people, and the preload's records wherever they
  # are (lab.py reads the record, never the -v text).
  awk -v p="@@LAB $id/exec|out " 'NR <= 20 || /^hugetext-report: / {print p $0}' "$dir/wait.out"
  # shellcheck disable=SC2086 # INSPECT_ALL is empty or --all
  outz "$id/inspect" "$ht" inspect --pid "$pid" --json $INSPECT_ALL
  awk -v p="@@LAB $id/maps|" '{print p $0}' "/proc/$pid/maps"
  outz "$id/file" "$ht" inspect --file "$file" --json
  stop_ready
  echo "@@LAB $id/exec|rc $?"
}

# The kernel's own tests. KUnit: the built-in suites ran at boot (the lab
# configuration builds the series' exec_folio and filemap_add_folio suites
# and binfmt_elf's), their KTAP is read back from the kernel log, with the
# i_pages lock counts filemap_add_folio prints. Then the selftests the series adds
# or that cover what it changes (built from the patched tree into
# $extra/selftests by scripts/kernel-lab.sh; the stock kernel runs the same
# binaries): each under a time limit, its TAP output as @@LAB lines. Run in
# the xfs cells (exec folios need a filesystem with PMD-order folios on
# both series) and whenever LAB_PART=selftests.
kunit() {
  dmesg | sed 's/^\[[ 0-9.]*\] //' |
    grep -E '^ *(KTAP version|# Subtest:|(not )?ok [0-9]+ |1\.\.[0-9]|# [A-Za-z0-9_]+: (pass:|i_pages lock:|probe:)|# Totals:)' |
    awk '{print "@@LAB kunit|" $0}'
}
kselftest() { # NAME SECONDS CMD...: one selftest program
  kname=$1; ksecs=$2; shift 2
  t0=$(date +%s)
  timeout -s KILL "$ksecs" "$@" > /tmp/kselftest.out 2>&1
  krc=$?
  # the TAP lines and the diagnostics (cow and uffd print thousands of
  # lines: only results, totals and failures' context are kept)
  grep -E '^(ok|not ok) |^# Totals|^# (SKIP|FAIL)|^Bail out|^# Planned|^1\.\.' /tmp/kselftest.out |
    awk -v p="@@LAB selftest/$kname|" '{print p $0}'
  grep -B3 '^not ok ' /tmp/kselftest.out | grep -vE '^(ok|not ok) ' | head -n 40 |
    awk -v p="@@LAB selftest/$kname|# context: " '{print p $0}'
  # A program that prints no TAP (6.12's uffd-unit-tests and khugepaged):
  # its summary line and the end of its output.
  if ! grep -qE '^(ok|not ok) ' /tmp/kselftest.out; then
    tail -n 25 /tmp/kselftest.out | awk -v p="@@LAB selftest/$kname|# tail: " '{print p $0}'
    # 6.12's khugepaged marks each step "OK", "Fail" or "Skip"
    echo "@@LAB selftest/$kname|# steps: ok $(grep -c 'OK' /tmp/kselftest.out) fail $(grep -c 'Fail' /tmp/kselftest.out) skip $(grep -c 'Skip' /tmp/kselftest.out)"
  fi
  echo "@@LAB selftest/$kname|@seconds $(($(date +%s) - t0))"
  echo "@@LAB selftest/$kname|@rc $krc"
}
kselftests() {
  khrestore
  st=$extra/selftests
  [ -d "$st" ] || { echo "@@LAB selftest|@missing"; return 0; }
  # the sysctls at their defaults; THP as the cell booted it, so that a
  # cell booted with THP never or madvise shows the selftests' skips
  setting off
  setting boot
  kd=$dir/selftests
  mkdir -p "$kd" && cd "$kd" || return 0
  # load_address_pmd execs itself: from the disk under test, whose page
  # cache may hold PMD folios
  cp "$st/exec/load_address_pmd" "$kd/" 2> /dev/null
  # and its static-PIE twin (the 7.x series' form), which it execs from there
  cp "$st/exec/load_address_pmd_static" "$kd/" 2> /dev/null
  kselftest exec_folios 300 "$st/mm/exec_folios" "$kd"
  # Its skip paths: a test directory on tmpfs (no PMD-sized page-cache
  # folios without huge=) and on a noexec mount (a bind mount of the disk
  # under test).
  mkdir -p /tmp/lab-tmpfs /tmp/lab-noexec "$kd/noexec"
  if mount -t tmpfs -o size=64m lab-tmpfs /tmp/lab-tmpfs; then
    kselftest exec_folios-tmpfs 300 "$st/mm/exec_folios" /tmp/lab-tmpfs
    umount /tmp/lab-tmpfs
  fi
  if mount --bind "$kd/noexec" /tmp/lab-noexec && mount -o remount,bind,noexec /tmp/lab-noexec; then
    kselftest exec_folios-noexec 300 "$st/mm/exec_folios" /tmp/lab-noexec
  fi
  umount /tmp/lab-noexec 2> /dev/null
  kselftest load_address_pmd 300 "$kd/load_address_pmd"
  kselftest soft-dirty 300 "$st/mm/soft-dirty"
  kselftest mkdirty 300 "$st/mm/mkdirty"
  kselftest cow 1500 "$st/mm/cow"
  # (the boots for KUnit and the selftests alone, under THP madvise or
  # never, leave out the longest, which tests no THP-mode skip; set
  # LAB_UFFD=1 on the kernel command line to run it there too)
  if [ "${LAB_PART:-}" != selftests ] || [ "${LAB_UFFD:-}" = 1 ]; then
    kselftest uffd-unit-tests 900 "$st/mm/uffd-unit-tests"
  fi
  kselftest khugepaged 1200 "$st/mm/khugepaged"
  # readahead into a memory cgroup at its limit (the 7.x RFC's); skips
  # where the kernel has no memory controller (the lab configuration has
  # no CONFIG_MEMCG; scripts/kernel-lab.sh --lockstat boots one with it)
  if [ -x "$st/mm/readahead_memcg" ]; then
    grep -q ' cgroup2 ' /proc/mounts || mount -t cgroup2 cgroup2 /sys/fs/cgroup
    kselftest readahead_memcg 600 "$st/mm/readahead_memcg" "$kd"
  fi
  cd - > /dev/null || true
  rm -rf "$kd"
  setting off
  setting boot
}

if [ "${LAB_PART:-}" = selftests ]; then
  kunit
  kselftests
  rm -rf "$dir"
  echo "@@HT {\"kind\":\"probe\",\"name\":\"lab\",\"thp\":\"$mode\",\"rc\":0}"
  exit 0
fi
kunit

# The benchmarks of the batching patches (LAB_PART=bench on the kernel
# command line, scripts/kernel-lab.sh --bench): `bench mprotect` with
# vm.mprotect_pte_batch 0 and 1, alternating A B A B; the exec switches
# stay at their defaults. Timings are emulated under TCG.
if [ "${LAB_PART:-}" = bench ]; then
  if [ ! -e /proc/sys/vm/mprotect_pte_batch ]; then
    echo "@@LAB bench|@rc 2"
    echo "@@LAB bench|this kernel has no vm.mprotect_pte_batch"
  else
    for round in 1 2; do
      for sw in 0 1; do
        echo "$sw" > /proc/sys/vm/mprotect_pte_batch
        outz "$sw/bench/mprotect-$round" "$ht" bench mprotect --size "${LAB_MPROTECT_SIZE:-128M}" --loops 10 --runs 3 --allow-sysfs --json
      done
      echo 0 > /proc/sys/vm/mprotect_pte_batch
    done
  fi
  rm -rf "$dir"
  echo "@@HT {\"kind\":\"probe\",\"name\":\"lab\",\"thp\":\"$mode\",\"rc\":0}"
  exit 0
fi

# The fixtures: NAME PROGRAM FILE-WHOSE-TEXT-COUNTS [ARGS]
fx=target/fixtures
# node runs a script that says "ready" and waits for end of input.
node_args=$extra/ready.js
fixtures="bfd lld mold dso"
[ -x "$extra/node" ] && fixtures="$fixtures node"
fixtures=${LAB_FIXTURES:-$fixtures}
INSPECT_ALL=

prepare() { # NAME DIR: copy the fixture's files into DIR (fresh, evicted); sets prog, text
  name=$1; d=$2
  rm -rf "$d" && mkdir -p "$d"
  case $name in
    bfd|lld|mold) fresh "$d/pie" "$fx/$name/pie"; prog=$d/pie; text=$d/pie ;;
    dso) fresh "$d/usebig" "$fx/bfd/usebig"; fresh "$d/libbig.so" "$fx/bfd/libbig.so"
         prog=$d/usebig; text=$d/libbig.so ;;
    node) fresh "$d/node" "$extra/node"; prog=$d/node; text=$d/node ;;
  esac
}

run_prog() { # PROG: the program's waiting command line
  case $1 in
    */node) echo "$1" ;;
    *) echo "$1 wait" ;;
  esac
}

for name in $fixtures; do
  # plain, once per setting (a patched kernel: off, on, congruent)
  for s in $settings; do
    [ "$s" = congruent ] && [ "$name" = dso ] && continue
    setting "$s"
    prepare "$name" "$dir/$name"
    if [ "$name" = node ]; then
      measure "$s/$name/plain" "$text" "$prog" "$node_args"
    else
      # split on purpose: run_prog prints a command line
      # shellcheck disable=SC2046
      measure "$s/$name/plain" "$text" $(run_prog "$prog")
    fi
  done
done

# 7.3 as it runs: khugepaged on. The GNU ld PIE exec'd again (a fresh,
# evicted copy) under the kernel's last setting, then khugepaged given back
# its interval while the program waits: its text's PMD mappings
# (FilePmdMapped) at the first exec, after 10 s and after 60 s (guest
# time, emulated). Only where khugepaged can collapse file text at all
# (large folios, THP `always`).
khugepaged_wait() { # ID CMD...
  kid=$1; shift
  start_ready "$dir/wait.out" 1200 "$@"
  khrestore
  kt0=$(date +%s)
  for at in 0 10 60; do
    while [ $(($(date +%s) - kt0)) -lt $at ]; do sleep 1; done
    echo "@@LAB $kid/khugepaged|at $at pmd_kb $(awk '/^FilePmdMapped:/ {print $2}' "/proc/$pid/smaps_rollup") full_scans $(cat /sys/kernel/mm/transparent_hugepage/khugepaged/full_scans 2> /dev/null)"
  done
  [ -n "$khsaved" ] && echo 3600000 > "$khsleep"
  stop_ready
  echo "@@LAB $kid/khugepaged|@rc $?"
}
s=${settings##* }
# (6.12 has no collapse of file text without READ_ONLY_THP_FOR_FS.)
case $(uname -r) in 6.*) khfile=0 ;; *) khfile=1 ;; esac
if [ $lf = 1 ] && [ -n "$khsaved" ] && [ $khfile = 1 ]; then
  setting "$s"
  if grep -q '\[always\]' "$thp_enabled"; then
    prepare bfd "$dir/bfd"
    khugepaged_wait "$s/bfd" "$prog" wait
    rm -rf "${dir:?}/bfd"
  fi
fi

# Then the hugetext steps (the plain execs of every fixture come first: they
# are what the lab is for); the base kernel is only the guard's reference.
hfixtures=$fixtures
[ "$variant" = base ] && hfixtures=
for name in $hfixtures; do
  # the hugetext steps, under the kernel's default setting; on a patched
  # kernel without large folios (only `run` is measured there) also with
  # every switch off, which is stock's behaviour
  hsettings=${settings##* }
  [ "$variant" = patched ] && hsettings=on
  [ "$variant" = patched ] && [ $lf = 0 ] && hsettings="off on"
  for s in $hsettings; do
  setting "$s"
  prepare "$name" "$dir/$name"
  # Without large folios (ext4 before 6.16) neither `align` nor `warm` can
  # make anything PMD-mappable, on either kernel (doctor says so, and
  # `warm` exits 3): only `run` (its copy route) is measured there.
  if [ $lf = 1 ]; then
  # align: the text file rewritten, then a plain exec of it
  out "$s/$name/align/cmd" "$ht" align "$text" -o "$text.aligned"
  aligned=$text
  if [ -s "$text.aligned" ]; then
    fresh "$text" "$text.aligned"
    aligned=$text
  fi
  if [ "$name" = node ]; then
    measure "$s/$name/align" "$aligned" "$prog" "$node_args"
  else
    # split on purpose: run_prog prints a command line
    # shellcheck disable=SC2046
    measure "$s/$name/align" "$aligned" $(run_prog "$prog")
  fi
  # warm: the aligned file's page cache filled with PMD folios, then a plain exec
  evict "$aligned"
  out "$s/$name/warm/cmd" "$ht" warm "$aligned"
  if [ "$name" = node ]; then
    measure "$s/$name/warm" "$aligned" "$prog" "$node_args"
  else
    # split on purpose: run_prog prints a command line
    # shellcheck disable=SC2046
    measure "$s/$name/warm" "$aligned" $(run_prog "$prog")
  fi
  fi
  # run: the original file under `hugetext run` (every route it finds)
  prepare "$name" "$dir/$name"
  if [ "$name" = node ]; then
    measure "$s/$name/run" "$text" "$ht" run -v -- "$prog" "$node_args"
  else
    # split on purpose: run_prog prints a command line
    # shellcheck disable=SC2046
    measure "$s/$name/run" "$text" "$ht" run -v -- $(run_prog "$prog")
  fi
  done
  rm -rf "${dir:?}/$name"
done

# The guard: what the patches must not change. Address randomisation off,
# so load addresses compare across settings and kernels.
# Only where exec folios can happen at all (large folios); on a patched
# kernel with everything off and with everything on (vm.elf_pmd_align=2,
# the broadest alignment).
g=$dir/guard
mkdir -p "$g"
INSPECT_ALL=--all
guard_settings=$settings
[ "$variant" = patched ] && guard_settings="off ${settings##* }"
[ "$variant" = stock ] && guard_settings=stock
# the base kernel: under the mode of each of the patched kernel's settings
[ "$variant" = base ] && guard_settings="off stock"
[ $lf = 1 ] || guard_settings=
for s in $guard_settings; do
  setting "$s"
  for b in bfd/nopie lld/nopie mold/nopie lld/pie mold/pie bfd/pie; do
    n=$(echo "$b" | tr / -)
    fresh "$g/$n" "$fx/$b"
    measure "$s/guard/$n" "$g/$n" "$labmap" norand "$g/$n" wait
  done
  for m in r rw; do
    fresh "$g/data-$m" "$fx/bfd/libbig.so"
    measure "$s/guard/map-$m" "$g/data-$m" "$labmap" norand "$labmap" map "$g/data-$m" "$m"
  done
done

[ "${HT_FS:-}" = xfs ] && [ "$variant" != base ] && kselftests

# The exec benchmark, short, under the kernel's default
# setting (timings are emulated under TCG: the states and counts are the result).
s=${settings##* }
[ "$variant" = patched ] && s=on
setting "$s"
if [ -z "${LAB_NO_BENCH:-}" ] && [ $lf = 1 ] && [ "$variant" != base ]; then
  out "$s/bench/exec" "$ht" bench exec --size 32M --runs 1 --random-passes 1 --dir "$dir" --json
fi
setting boot
rm -rf "$dir"
echo "@@HT {\"kind\":\"probe\",\"name\":\"lab\",\"thp\":\"$mode\",\"rc\":0}"
