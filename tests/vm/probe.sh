#!/bin/sh
# Route probes of a kernel-matrix guest, run from the repository root on the
# disk under test after the tests of one THP mode (argument: the mode).
# Each probe runs the real `hugetext` command on a fresh copy of a fixture
# and reports its output (@@OUT lines) and status (@@HT lines); the host's
# tests/vm/matrix.py reads the route and the PMD-mapped kB from them.
mode=$1
caps=$2   # the guest's capabilities (guest-init.sh), e.g. "large-folios madv-collapse"
has() { case " $caps " in *" $1 "*) return 0 ;; esac; return 1; }
ht=$PWD/target/release/hugetext
# The preload's machine-readable record of each pass, which matrix.py reads.
export HUGETEXT_REPORT=json
dir=$PWD/target/scratch/probe-$mode
rm -rf "$dir" && mkdir -p "$dir"

. tests/vm/probe-lib.sh

# MATRIX_PART=mprotect on the kernel command line (kernel-matrix.sh --append,
# with an empty plan): only the mprotect benchmark of the "Optimize
# mprotect() for large folios" patches, on this distro kernel as it ships
# (7.x carries the batching, 6.12 does not); counts and verified states are
# the evidence, TCG timings are emulated.
if [ "${MATRIX_PART:-}" = mprotect ]; then
  for round in 1 2; do
    capture "bench-mprotect-$round" "$ht" bench mprotect --size 128M --loops 10 --runs 3 --allow-sysfs --json
  done
  rm -rf "$dir"
  exit 0
fi

# fresh NAME SRC: a copy of SRC, written back and evicted from the page cache
# (GNU dd's nocache flag: POSIX_FADV_DONTNEED on the whole file).
fresh() {
  cp "$2" "$dir/$1" && sync && dd if="$dir/$1" iflag=nocache count=0 2> /dev/null
}

# pmd_kb_of PROG: FilePmdMapped + AnonHugePages kB of PROG's text while it waits.
pmd_kb_of() {
  start_ready "$dir/wait.out" 300 "$@" wait
  awk '/^FilePmdMapped:/ {f += $2} /^AnonHugePages:/ {a += $2} END {printf "file_pmd_kb=%d anon_huge_kb=%d\n", f, a}' "/proc/$pid/smaps"
  stop_ready
}

capture doctor "$ht" doctor --json --path "$dir"
# Each disk's readahead window as the guest booted it: the exec and mmap
# readahead paths read up to it, so the benchmark's fault counts depend on it.
# expanded by the inner shell
# shellcheck disable=SC2016
capture read-ahead sh -c 'for q in /sys/block/vd*/queue/read_ahead_kb; do d=${q#/sys/block/}; echo "${d%%/*} $(cat "$q")"; done'

# An lld PIE made PMD-mappable by `align`, on the disk under test.
lld=target/fixtures/lld
"$ht" align "$lld/pie" -o "$dir/pie.aligned" > /dev/null 2>&1

# warm, then a plain exec of the warmed file.
fresh warm.pie "$dir/pie.aligned"
capture warm "$ht" warm --json "$dir/warm.pie"
capture warm-exec pmd_kb_of "$dir/warm.pie"

# warm's routes on a file a running process maps (its small folios cannot
# be evicted): collapse in place where the kernel collapses file text
# (7.x), and --replace (a warmed copy renamed over it); warm's JSON gives
# each one's milliseconds, matrix.py the ms/MiB.
for w in mapped replace; do
  fresh "warm-$w.pie" "$dir/pie.aligned"
  start_ready "$dir/warm-$w.out" 300 "$dir/warm-$w.pie" wait
  case $w in
    mapped) capture warm-mapped "$ht" warm --json "$dir/warm-$w.pie" ;;
    replace) capture warm-replace "$ht" warm --json --replace "$dir/warm-$w.pie" ;;
  esac
  stop_ready
done

# run: each route on a never-read copy (aligned: file route possible; the
# lld original: not congruent, only a copy helps).
for s in auto file copy collapse; do
  fresh "run-$s.pie" "$dir/pie.aligned"
  capture "run-$s-aligned" "$ht" run -v --strategy "$s" -- "$dir/run-$s.pie"
done
fresh run-auto-lld.pie "$lld/pie"
capture run-auto-unaligned "$ht" run -v -- "$dir/run-auto-lld.pie"

# A library: usebig + libbig.so (bfd), every route through the preload.
mkdir -p "$dir/dso" && cp target/fixtures/bfd/usebig target/fixtures/bfd/libbig.so "$dir/dso/"
sync
capture run-auto-dso "$ht" run -v -- "$dir/dso/usebig"

# Shared huge text from a huge tmpfs (the text store): 4 processes of the
# aligned PIE, their ShmemPmdMapped and private kB, ShmemHugePages.
capture shmem-text shmem_text "$dir/pie.aligned"

# No hugetext step at all: what exec gives by itself.
fresh plain.pie "$dir/pie.aligned"
capture plain-exec pmd_kb_of "$dir/plain.pie"

# aarch64: per fixture, what a plain exec, `warm` then exec, `align` and
# `warm` then exec, `run` (and for lld `run --hot`) give the text, in kB PMD-mapped and in kB of contpte blocks: naturally aligned,
# physically contiguous blocks of the contpte size inside one folio, mapped
# by PTEs (`inspect --cont`; 64 KiB with 4 KiB pages, 2 MiB with 16 KiB).
# The base page size, kB.
page_kb=$(awk '/^KernelPageSize:/ {print $2; exit}' /proc/self/smaps)
if [ "$(uname -m)" = aarch64 ]; then
  case $page_kb in
    4) cont=64K ;;
    *) cont=2M ;;
  esac
  # measure PROG...: smaps totals and inspect's JSON of PROG while it waits.
  measure_of() {
    start_ready "$dir/wait.out" 600 "$@" wait
    awk '/^FilePmdMapped:/ {f += $2} /^AnonHugePages:/ {a += $2} END {printf "file_pmd_kb=%d anon_huge_kb=%d\n", f, a}' "/proc/$pid/smaps"
    echo "cont=$cont"
    "$ht" inspect --pid "$pid" --rollup --cont "$cont" --json 2>&1 | tr -d '\n'
    echo
    stop_ready
  }
  # measure_hot PROFILE PROG...: measure_of PROG..., then the record of
  # the program's pass (its hot and cold totals, HUGETEXT_REPORT=json) and
  # what the profile held (`profile --json`, on one line after
  # "hugetext-profile: "); matrix.py reads both through report.py.
  measure_hot() {
    mh_profile=$1; shift
    measure_of "$@"
    grep -h '^hugetext-report: ' "$dir/wait.out" | tail -n 1
    printf 'hugetext-profile: '
    "$ht" profile --input "$mh_profile" --json 2> "$dir/profile-json.err" | tr -d '\n'
    echo
  }
  for l in bfd lld mold; do
    [ -x "target/fixtures/$l/pie" ] || continue
    fresh "fx-$l.pie" "target/fixtures/$l/pie"
    capture "fixture-plain-$l" measure_of "$dir/fx-$l.pie"
    if has large-folios; then
      fresh "fx-warm-$l.pie" "target/fixtures/$l/pie"
      "$ht" warm "$dir/fx-warm-$l.pie" > /dev/null 2>&1
      capture "fixture-warm-$l" measure_of "$dir/fx-warm-$l.pie"
      # What a user does for a PIE whose base is only p_align-aligned
      # (64 KiB on aarch64): align (p_align = the PMD size, so the kernel
      # places the base PMD-aligned), warm, exec.
      fresh "fx-align-$l.pie" "target/fixtures/$l/pie"
      "$ht" align "$dir/fx-align-$l.pie" > /dev/null 2>&1
      "$ht" warm "$dir/fx-align-$l.pie" > /dev/null 2>&1
      capture "fixture-alignwarm-$l" measure_of "$dir/fx-align-$l.pie"
    fi
    fresh "fx-run-$l.pie" "target/fixtures/$l/pie"
    capture "fixture-run-$l" measure_of "$ht" run -- "$dir/fx-run-$l.pie"
    # run --hot: a sampled profile of the fixture's own run (cpu-clock, as
    # on a machine with no PMU), then only the windows holding its samples.
    if [ "$l" = lld ]; then
      "$ht" profile --frequency 4999 -o "$dir/fx-$l.profile.json" -- "$dir/fx-$l.pie" > "$dir/profile.out" 2>&1 ||
        sed 's/^/profile: /' "$dir/profile.out"
      fresh "fx-hot-$l.pie" "target/fixtures/$l/pie"
      capture "fixture-hot-$l" measure_hot "$dir/fx-$l.profile.json" "$ht" run --hot "$dir/fx-$l.profile.json" -- "$dir/fx-hot-$l.pie"
    fi
  done
fi

# The exec benchmark, short (timings are emulated under TCG: states only).
# Where the kernel gives no folios of the unit, its huge and warm variants
# say what they got instead (6.12 with 64 KiB pages: the contrast with 7.x);
# it runs x86-64 or AArch64 RET stubs, whichever the machine is.
bench_exec() { "$ht" bench exec --size 32M --runs 1 --random-passes 1 --dir "$dir" --json; }
capture bench-exec bench_exec
# With 64 KiB pages, again at two fixed readahead windows of the disk under
# test (vda): the kernels boot it with different ones (6.12 128 kB, 7.3
# 8192 kB here), and the exec and mmap readahead paths read up to it.
if [ "$(uname -m)" = aarch64 ] && [ "$page_kb" = 64 ]; then
  ra=/sys/block/vda/queue/read_ahead_kb
  was=$(cat $ra)
  for kb in 128 8192; do
    echo "$kb" > $ra
    capture "bench-exec-ra$kb" bench_exec
  done
  echo "$was" > $ra
fi
kernel_bench
rm -rf "$dir"
