#!/usr/bin/env bash
# What the kernel's exec folios and ELF alignment, and hugetext, give on a
# real machine: run on a machine booted into a stock or a patched kernel
# (scripts/kernel-lab.sh --package builds both), once per kernel.
#
#   scripts/kernel-bench.sh [--quick] [--runs N] [--out DIR] [--hugetext PATH]
#                           [--fixtures DIR] [--kernel-kind stock|patched]
#
# For each program (the ELF fixtures, and node, clang and postgres where
# installed; a line says which are skipped) and each route:
#   plain     the program as it is (the kernel's own behaviour: khugepaged,
#             and on a patched kernel its exec folios and ELF alignment)
#   madvise   `hugetext run --strategy file` on a copy made PMD-mappable by
#             `hugetext align` (once): MADV_HUGEPAGE on the text and its
#             windows read into PMD folios by the kernel (evict + refill)
#   warm      `hugetext warm` on that copy, then the copy
#   run       `hugetext run` (any route hugetext finds)
# it measures, over --runs runs (median):
#   wall_ms        the run, page cache warm
#   cycles, itlb_misses, itlb_walks
#                  `perf stat` cycles, iTLB-load-misses and
#                  itlb_misses.walk_completed; "unavailable" with the reason
#                  where there is no perf, no such counter (a virtual
#                  machine without a PMU) or perf_event_paranoid forbids it
#   cold_ms        the first start after the program's files were evicted
#                  from the page cache (their pages only: no drop_caches)
#   cold_read_kb   kB read from disk during that start (/proc/vmstat pgpgin)
#   cached_kb      growth of the page cache (meminfo Cached) during it
#   text_pmd_kb    FilePmdMapped + AnonHugePages of the program's executable
#                  mappings while it runs (programs that can wait: the
#                  fixtures' `wait`, node)
# The kernel is reported as "patched" when it carries the exec folio
# patches (their KUnit suite `exec_folio` in debugfs or the kernel log, or
# their functions in /proc/kallsyms), "stock" otherwise; --kernel-kind says
# otherwise.
#
# Writes DIR/kernel-bench.json and DIR/kernel-bench.md (a table like
# doc/kernel.md's); DIR defaults to target/kernel-bench. --quick: one
# fixture (lld's PIE), 3 runs (what CI's lab guests run). Run it as root
# (/proc/kallsyms shows its names to root only); it changes no setting.
# Exit status 0, 1 when a program failed, 2 for bad usage.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
die() { echo "kernel-bench: $*" >&2; exit 2; }
say() { echo "kernel-bench: $*" >&2; }

quick=0
runs=
out=$here/target/kernel-bench
ht=
fixtures=$here/target/fixtures
kind=
while [ $# -gt 0 ]; do
  case $1 in
    --quick) quick=1 ;;
    --runs) shift; runs=${1:?--runs needs a number} ;;
    --out) shift; out=${1:?--out needs a directory} ;;
    --hugetext) shift; ht=${1:?--hugetext needs a path} ;;
    --fixtures) shift; fixtures=${1:?--fixtures needs a directory} ;;
    --kernel-kind) shift; kind=${1:?--kernel-kind needs stock or patched}
      case $kind in stock|patched) ;; *) die "--kernel-kind is stock or patched, not '$kind'" ;; esac ;;
    -h|--help) sed -n '2,/^set -euo/{/^#/p}' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
  shift
done
[ -n "$runs" ] || { [ $quick = 1 ] && runs=3 || runs=10; }
case $runs in ''|*[!0-9]*|0) die "--runs needs a number of at least 1, not '$runs'" ;; esac
if [ -z "$ht" ]; then
  if [ -x "$here/target/release/hugetext" ]; then ht=$here/target/release/hugetext
  else ht=$(command -v hugetext || true); fi
fi
if [ -z "$ht" ] || [ ! -x "$ht" ]; then die "no hugetext binary (build it, or name it with --hugetext)"; fi
[ -n "${EPOCHREALTIME:-}" ] || die "needs bash 5 (EPOCHREALTIME)"
mkdir -p "$out"
# The work directory (the warm route's copies) on the disk of DIR, not a
# memory filesystem: its files are measured in the page cache.
work=$(mktemp -d "$out/work.XXXXXX")
trap 'rm -rf "$work"' EXIT

# --- the kernel ----------------------------------------------------------------
evidence=
if [ -z "$kind" ]; then
  kind=stock
  if [ -d /sys/kernel/debug/kunit/exec_folio ]; then
    kind=patched; evidence="KUnit suite exec_folio in debugfs"
  elif dmesg 2> /dev/null | grep -q 'Subtest: exec_folio'; then
    kind=patched; evidence="KUnit suite exec_folio in the kernel log"
  elif grep -qwE 'exec_folio_trim|elf_segment_wants_pmd' /proc/kallsyms 2> /dev/null; then
    kind=patched; evidence="exec folio functions in /proc/kallsyms"
  else
    evidence="no exec_folio KUnit suite, no exec folio functions in /proc/kallsyms"
  fi
else
  evidence="--kernel-kind"
fi
thp=$(sed 's/.*\[\(.*\)\].*/\1/' /sys/kernel/mm/transparent_hugepage/enabled 2> /dev/null || echo absent)
khugepaged=$(cat /sys/kernel/mm/transparent_hugepage/khugepaged/defrag 2> /dev/null || echo absent)
say "kernel $(uname -r): $kind ($evidence); THP $thp"

# --- perf ----------------------------------------------------------------------
# The events perf can count here, each with its perf name; the others are
# reported unavailable with the reason.
perf_why=
perf_events=()
if ! command -v perf > /dev/null 2>&1; then
  perf_why="no perf (install linux-perf)"
else
  for e in cycles iTLB-load-misses itlb_misses.walk_completed; do
    if perf stat -x, -e "$e" -- true 2> "$work/perf-probe" > /dev/null &&
       ! grep -qE '<not (supported|counted)>' "$work/perf-probe"; then
      perf_events+=("$e")
    fi
  done
  if [ ${#perf_events[@]} -eq 0 ]; then
    perf_why="perf stat counts none of cycles, iTLB-load-misses, itlb_misses.walk_completed here (perf_event_paranoid $(cat /proc/sys/kernel/perf_event_paranoid 2> /dev/null || echo ?); a virtual machine may have no PMU)"
  fi
fi
[ -z "$perf_why" ] || say "hardware counters unavailable: $perf_why"

# --- the programs ----------------------------------------------------------------
# name|program|arguments (run from $work)|arguments of its waiting form
progs=()
linkers=(bfd lld mold)
[ $quick = 0 ] || linkers=(lld)
for l in "${linkers[@]}"; do
  [ -x "$fixtures/$l/pie" ] && progs+=("fixture-$l|$fixtures/$l/pie||wait")
done
[ ${#progs[@]} -gt 0 ] || say "no fixtures in $fixtures (tests/fixtures/mkfixtures.sh $fixtures): skipped"
if [ $quick = 0 ]; then
  if p=$(command -v node); then
    progs+=("node|$(readlink -f "$p")|-e 0|-e console.log('ready');process.stdin.resume()")
  else say "node not installed: skipped"; fi
  if p=$(command -v clang); then
    awk 'BEGIN { for (i = 0; i < 300; i++) printf "int f%d(int x) { return x * %d + f%d(x - 1); }\n", i + 1, i, i; }' > "$work/unit.c"
    sed -i '1i int f0(int x) { return x; }' "$work/unit.c"
    progs+=("clang|$(readlink -f "$p")|-O2 -c $work/unit.c -o $work/unit.o|")
  else say "clang not installed: skipped"; fi
  p=$(command -v postgres || printf '%s\n' /usr/lib/postgresql/*/bin/postgres | sort -V | tail -n 1)
  if [ -n "$p" ] && [ -x "$p" ]; then
    progs+=("postgres|$(readlink -f "$p")|--describe-config|")
  else say "postgres not installed: skipped"; fi
fi
[ ${#progs[@]} -gt 0 ] || die "no program to measure"

# The files a program maps: itself and the libraries ldd names.
files_of() { # FILE
  echo "$1"
  { ldd "$1" 2> /dev/null || true; } | grep -o '/[^ ]*' | while read -r l; do readlink -f "$l"; done
}
evict() { # FILE...
  local f
  for f in "$@"; do dd if="$f" iflag=nocache count=0 2> /dev/null || true; done
}
now_us() { local t=${EPOCHREALTIME/[.,]/}; echo "$t"; }
vmstat_of() { awk -v k="$1" '$1 == k {print $2}' /proc/vmstat; }
meminfo_of() { awk -v k="$1:" '$1 == k {print $2}' /proc/meminfo; }
median() { sort -n | awk '{v[NR] = $1} END { if (NR == 0) print "null"; else print v[int((NR + 1) / 2)] }'; }

# route_cmd ROUTE CMD: the command line of CMD under ROUTE (warm is done before).
route_prefix() {
  case $1 in
    plain|warm) echo "" ;;
    madvise) echo "$ht run --strategy file --" ;;
    run) echo "$ht run --" ;;
  esac
}

failed=0
rows=()
json_rows=()
for p in "${progs[@]}"; do
  IFS='|' read -r name exe args hold <<< "$p"
  # The warm route's copy, made PMD-mappable (align refuses a program it
  # need not or cannot change: then the copy is the program as it is).
  aligned=$work/$name.aligned
  "$ht" align "$exe" -o "$aligned" > /dev/null 2>&1 || cp "$exe" "$aligned"
  for route in plain madvise warm run; do
    pre=$(route_prefix "$route")
    prog=$exe
    case $route in warm|madvise) prog=$aligned ;; esac
    mapfile -t files <<< "$(files_of "$prog" | sort -u)"
    # shellcheck disable=SC2206 # the command line, split on purpose
    line=($pre $prog $args)
    # cold start: the program's files evicted (and warmed first under `warm`)
    # (written back first: eviction drops only clean pages)
    sync
    evict "${files[@]}"
    c0=$(meminfo_of Cached); r0=$(vmstat_of pgpgin); t0=$(now_us)
    ok=1
    # warm fills what it can: a file without a whole window is no failure
    if [ "$route" = warm ]; then "$ht" warm "$prog" > "$work/warm" 2>&1 || true; fi
    (cd "$work" && "${line[@]}") > "$work/out" 2>&1 || ok=0
    t1=$(now_us); r1=$(vmstat_of pgpgin); c1=$(meminfo_of Cached)
    if [ $ok = 0 ]; then
      say "$name under $route failed: $(tail -n 1 "$work/out")"
      failed=1
      json_rows+=("{\"program\":\"$name\",\"route\":\"$route\",\"ok\":false}")
      continue
    fi
    cold_ms=$(( (t1 - t0) / 1000 ))
    cold_read_kb=$(( r1 - r0 ))
    cached_kb=$(( c1 - c0 ))
    # warm runs: wall time, and perf's counters where it has them
    : > "$work/wall"; : > "$work/cyc"; : > "$work/itlb"; : > "$work/walk"
    for _ in $(seq "$runs"); do
      t0=$(now_us)
      if [ ${#perf_events[@]} -gt 0 ]; then
        ev=$(IFS=,; echo "${perf_events[*]}")
        (cd "$work" && perf stat -x, -o "$work/perf" -e "$ev" -- "${line[@]}") > /dev/null 2>&1 || ok=0
        awk -F, -v d="$work" '$3 == "cycles" || $3 ~ /^cycles/ {print $1 > d "/cyc.1"}
          $3 ~ /^iTLB-load-misses/ {print $1 > d "/itlb.1"}
          $3 ~ /^itlb_misses.walk_completed/ {print $1 > d "/walk.1"}' "$work/perf"
        for k in cyc itlb walk; do
          [ -f "$work/$k.1" ] && grep -E '^[0-9]+$' "$work/$k.1" >> "$work/$k"; rm -f "$work/$k.1"
        done
      else
        (cd "$work" && "${line[@]}") > /dev/null 2>&1 || ok=0
      fi
      t1=$(now_us)
      echo $(( (t1 - t0) / 1000 )) >> "$work/wall"
    done
    [ $ok = 1 ] || { say "$name under $route failed in a warm run"; failed=1; }
    wall_ms=$(median < "$work/wall")
    counter() { # FILE EVENT
      if [ -n "$perf_why" ]; then echo "\"unavailable: $perf_why\""
      elif [ -s "$1" ]; then median < "$1"
      else echo "\"unavailable: perf does not count $2 here\""; fi
    }
    cycles=$(counter "$work/cyc" cycles)
    itlb=$(counter "$work/itlb" iTLB-load-misses)
    walks=$(counter "$work/walk" itlb_misses.walk_completed)
    # resident text, while a waiting form runs
    pmd_kb=null
    if [ -n "$hold" ]; then
      # shellcheck disable=SC2206
      hline=($pre $prog $hold)
      [ "$route" != warm ] || "$ht" warm "$prog" > /dev/null 2>&1 || true
      rm -f "$work/fifo" && mkfifo "$work/fifo"
      # (the previous route's "ready" must not be taken for this one's)
      : > "$work/hold"
      (cd "$work" && exec "${hline[@]}" < "$work/fifo" > "$work/hold" 2>&1) &
      hpid=$!
      exec 3> "$work/fifo"
      # Until it says it is ready, for as long as it lives (a loaded
      # machine can take long), up to 10 minutes.
      i=0
      while ! grep -q ready "$work/hold" 2> /dev/null && kill -0 "$hpid" 2> /dev/null && [ $i -lt 6000 ]; do
        sleep 0.1; i=$((i + 1))
      done
      if grep -q ready "$work/hold"; then
        # the text mappings (r-xp) of the process: FilePmdMapped + AnonHugePages
        pmd_kb=$(awk '/^[0-9a-f]+-[0-9a-f]+ / {x = ($2 ~ /x/)} x && /^(FilePmdMapped|AnonHugePages):/ {s += $2} END {print s + 0}' "/proc/$hpid/smaps" 2> /dev/null || echo null)
      fi
      [ "$pmd_kb" != null ] ||
        say "$name $route: no resident text read: $(kill -0 "$hpid" 2> /dev/null && echo "no ready line after $((i / 10)) s" || echo "it ended before its smaps were read") ($(head -c 300 "$work/hold" | tr '\n' ' '))"
      exec 3>&-
      wait "$hpid" 2> /dev/null || true
    fi
    say "$name $route: wall ${wall_ms} ms, cold ${cold_ms} ms, read ${cold_read_kb} kB, text PMD ${pmd_kb} kB"
    rows+=("| $name | $route | $wall_ms | $(echo "$cycles" | tr -d '"' | sed 's/^unavailable.*/n\/a/') | $(echo "$itlb" | tr -d '"' | sed 's/^unavailable.*/n\/a/') | $(echo "$walks" | tr -d '"' | sed 's/^unavailable.*/n\/a/') | $cold_ms | $cold_read_kb | $cached_kb | $pmd_kb |")
    json_rows+=("{\"program\":\"$name\",\"route\":\"$route\",\"ok\":true,\"runs\":$runs,\"wall_ms\":$wall_ms,\"cycles\":$cycles,\"itlb_misses\":$itlb,\"itlb_walks\":$walks,\"cold_ms\":$cold_ms,\"cold_read_kb\":$cold_read_kb,\"cached_kb\":$cached_kb,\"text_pmd_kb\":$pmd_kb}")
  done
done

{
  printf '{"kernel":"%s","kind":"%s","evidence":"%s","machine":"%s","thp":"%s","khugepaged_defrag":"%s","quick":%s,"runs":%s,' \
    "$(uname -r)" "$kind" "$evidence" "$(uname -m)" "$thp" "$khugepaged" "$([ $quick = 1 ] && echo true || echo false)" "$runs"
  printf '"hardware_counters":%s,"results":[' "$([ -z "$perf_why" ] && echo '"available"' || echo "\"unavailable: $perf_why\"")"
  (IFS=,; printf '%s' "${json_rows[*]}")
  printf ']}\n'
} > "$out/kernel-bench.json"
{
  echo "Kernel $(uname -r) ($kind: $evidence), $(uname -m), THP \`$thp\`; median of $runs warm runs; cold: the first start after the program's files were evicted."
  [ -z "$perf_why" ] || echo "Hardware counters unavailable: $perf_why."
  echo
  echo "| program | route | wall ms | cycles | iTLB misses | iTLB walks | cold ms | cold read kB | page cache +kB | text PMD-mapped kB |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
} > "$out/kernel-bench.md"
cat "$out/kernel-bench.md"
say "wrote ${out#"$here"/}/kernel-bench.json and kernel-bench.md"
exit $failed
