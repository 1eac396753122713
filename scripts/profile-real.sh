#!/usr/bin/env bash
# Estimated instruction-TLB misses of real programs, 4 KiB text vs. the whole
# 2 MiB windows of text on huge pages, with `hugetext profile --exact` (the
# program runs under qemu-user; doc/profile.md, "Real programs"):
#
# - postgres: PostgreSQL 15 as a single-user backend (`postgres --single`, no
#   forking server) answering SELECTS point selects of pgbench -S
#   (`SELECT abalance FROM pgbench_accounts WHERE aid = N;`, N uniform, fixed
#   seed) on a `pgbench -i -s SCALE` database, run as the postgres user.
#   PostgreSQL arms a 10-second SIGALRM (to flush its statistics) at the
#   first query, and under qemu-user 7.2 its handler faults (qemu runs
#   x86-64 signal handlers on a stack misaligned for the SSE stores
#   PostgreSQL's use; doc/profile.md), with or without the plugin: the run
#   must end within 10 s under qemu (5,000 selects take 5-8 s here). A run
#   killed so is tried again, up to 3 times; on a slower machine lower
#   SELECTS;
# - chromium: `chromium --headless --no-sandbox --single-process
#   --disable-gpu --dump-dom` of one small local page, the browser binary
#   itself (Debian's /usr/bin/chromium is a shell script that execs it, and
#   a program the profiled one execs runs natively, unobserved).
#
#   cargo build --release
#   scripts/profile-real.sh [postgres] [chromium]      # default: both
#
# Environment: HUGETEXT (default target/release/hugetext), HT_PROFILE_DIR
# (scratch, default /tmp/ht-profile-real), SELECTS (5000), SCALE (2),
# MODELS (default "skylake zen4 neoverse-v2": one run per model). Runs as
# root (postgres runs as its own user). Prints one Markdown row per program
# and model; the profiles (JSON) and outputs stay in the scratch directory
# (postgres's in its pg/ directory, which the postgres user owns).
# Instruction counts of chromium vary from run to run by a few percent
# (threads, timers).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
ht=${HUGETEXT:-$root/target/release/hugetext}
w=${HT_PROFILE_DIR:-/tmp/ht-profile-real}
selects=${SELECTS:-5000}
scale=${SCALE:-2}
read -r -a models <<< "${MODELS:-skylake zen4 neoverse-v2}"
pg=/usr/lib/postgresql/15/bin
chrome=/usr/lib/chromium/chromium
say() { printf 'profile-real: %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (postgres runs as its own user)"
[ -x "$ht" ] || die "$ht not found: cargo build --release (or set HUGETEXT)"
mkdir -p "$w/bin"
chmod 755 "$w" "$w/bin"
# A copy the postgres user can run whatever the permissions of the tree.
install -m 755 "$ht" "$w/bin/hugetext"
ht=$w/bin/hugetext
as_postgres=(setpriv --reuid=postgres --regid=postgres --init-groups --)

# One Markdown row of an exact profile: PROGRAM MODEL JSON.
row() {
  python3 - "$@" <<'EOF'
import json, sys
prog, model, path = sys.argv[1:4]
e = json.load(open(path))["itlb"]
a = e["all"]
n, s, h = a["instructions"], a["small"], a["huge"]
k = lambda x: 1000.0 * x / n
red = lambda x, y: f"{100.0 * (y - x) / x:+.1f}%".replace("-", "\u2212") if x else "n/a"
print(f"| {prog} | {model} | {n:,} | {k(s['l1']):.3f} → {k(h['l1']):.3f} ({red(s['l1'], h['l1'])}) "
      f"| {k(s['walks']):.4f} → {k(h['walks']):.4f} ({s['walks']:,} → {h['walks']:,}) "
      f"| {a['small_cycles'] / 1e6:.1f} M → {a['huge_cycles'] / 1e6:.1f} M ({red(a['small_cycles'], a['huge_cycles'])}) "
      f"| {100.0 * a['small_cycles'] / n:.2f}% |")
EOF
}

prepare_postgres() {
  local d=$w/pg
  if [ ! -f "$d/data/PG_VERSION" ] || [ ! -f "$d/scale-$scale" ]; then
    rm -rf "$d"
    mkdir -p "$d"
    chown postgres:postgres "$d"
    say "initdb and pgbench -i -s $scale in $d"
    "${as_postgres[@]}" "$pg/initdb" -D "$d/data" -A trust -U postgres >/dev/null
    "${as_postgres[@]}" "$pg/pg_ctl" -D "$d/data" -l "$d/init.log" -w \
      -o "-k $d -p 54331 -c listen_addresses=''" start >/dev/null
    "${as_postgres[@]}" "$pg/pgbench" -h "$d" -p 54331 -i -s "$scale" postgres >/dev/null 2>&1 ||
      { "${as_postgres[@]}" "$pg/pg_ctl" -D "$d/data" -m fast -w stop >/dev/null; die "pgbench -i failed"; }
    "${as_postgres[@]}" "$pg/pg_ctl" -D "$d/data" -m fast -w stop >/dev/null
    touch "$d/scale-$scale"
  fi
  python3 -c "
import random, sys
r = random.Random(1)
n, rows = int(sys.argv[1]), 100000 * int(sys.argv[2])
print('\n'.join(f'SELECT abalance FROM pgbench_accounts WHERE aid = {r.randint(1, rows)};' for _ in range(n)))
" "$selects" "$scale" > "$w/selects.sql"
  chmod 644 "$w/selects.sql"
}

profile_postgres() {
  [ -x "$pg/postgres" ] || { say "postgres 15 not installed: skipped"; return; }
  prepare_postgres
  for m in "${models[@]}"; do
    local out=$w/pg/postgres-$m # the postgres user writes the profile
    local try
    for try in 1 2 3; do
      say "postgres --single, $selects point selects, --itlb $m (try $try)"
      "${as_postgres[@]}" "$ht" profile --exact --itlb "$m" -o "$out.json" -- \
        "$pg/postgres" --single -D "$w/pg/data" postgres < "$w/selects.sql" > "$out.out" 2> "$out.err" ||
        die "postgres under --exact failed: see $out.err"
      grep -q 'uncaught target signal' "$out.err" || break
    done
    local got
    got=$(grep -c 'abalance = ' "$out.out" || true)
    [ "$got" = "$selects" ] || die "postgres answered $got of $selects selects: see $out.out"
    ! grep -q 'stops early\|ended with' "$out.err" || die "postgres's profile is partial: see $out.err"
    row postgres "$m" "$out.json"
  done
}

profile_chromium() {
  [ -x "$chrome" ] || { say "chromium not installed: skipped"; return; }
  printf '<html><body><h1>hugetext</h1><p>one small page</p></body></html>\n' > "$w/page.html"
  for m in "${models[@]}"; do
    local out=$w/chromium-$m
    rm -rf "$w/chromium-profile"
    say "chromium --headless --single-process --dump-dom, --itlb $m"
    "$ht" profile --exact --itlb "$m" -o "$out.json" -- "$chrome" --headless --no-sandbox \
      --single-process --disable-gpu --user-data-dir="$w/chromium-profile" \
      --dump-dom "file://$w/page.html" > "$out.out" 2> "$out.err" ||
      die "chromium under --exact failed: see $out.err"
    grep -q 'one small page' "$out.out" || die "chromium printed no DOM: see $out.err"
    ! grep -q 'stops early\|ended with' "$out.err" || die "chromium's profile is partial: see $out.err"
    row chromium "$m" "$out.json"
  done
}

echo "| program | model | instructions | L1 iTLB misses /1k, 4K → 2M | walks /1k, 4K → 2M (count) | miss cycles, 4K → 2M | 4K miss cycles / instructions |"
echo "|---|---|---|---|---|---|---|"
[ $# -gt 0 ] || set -- postgres chromium
for p in "$@"; do
  case $p in
    postgres) profile_postgres ;;
    chromium) profile_chromium ;;
    *) die "unknown program $p (postgres, chromium)" ;;
  esac
done
