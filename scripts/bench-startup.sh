#!/usr/bin/env bash
# The cost of `hugetext run` on real programs' start-up, and the build of
# many small files (doc/bench.md, "bench startup"): each case is one
# `hugetext bench startup` run (plain, warm, and run with every route,
# paired and interleaved). Needs root; clang, python3-numpy, nodejs and
# postgresql (scripts/install-deps.sh installs the first two).
#
#   scripts/bench-startup.sh [CASE...]     CASE: build clang numpy node postgres (default: all)
#   RUNS=20 OUT=dir JSON=1 scripts/bench-startup.sh build      (JSON=1: --json)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
ht=${HUGETEXT:-$here/target/release/hugetext}
runs=${RUNS:-10}
out=${OUT:-$(mktemp -d /tmp/hugetext-bench-startup.XXXXXX)}
mkdir -p "$out"
cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=(build clang numpy node postgres)
bench() { # NAME ARGS...
  local name=$1; shift
  echo "== $name: hugetext bench startup --runs $runs $*" >&2
  "$ht" bench startup --runs "$runs" ${JSON:+--json} "$@" | tee "$out/$name.${JSON:+json}${JSON:-md}"
}
for c in "${cases[@]}"; do
  case $c in
    build)
      # A build of many small files: one clang process compiles 40 small C
      # files (clang runs its cc1 in-process, so `run` remaps it).
      src="$out/build-src"; mkdir -p "$src"
      for i in $(seq 1 40); do
        printf 'static int t%d[64];\nint f%d(int n){int s=0;for(int i=0;i<n;i++)s+=t%d[i%%64]*i;return s;}\n' "$i" "$i" "$i" > "$src/f$i.c"
      done
      files=()
      for i in $(seq 1 40); do files+=("f$i.c"); done
      (cd "$src" && bench build -- clang -O2 -c "${files[@]}")
      ;;
    clang) bench clang -- clang --version ;;
    numpy) bench numpy -- python3 -c 'import numpy' ;;
    node) bench node -- node -e 0 ;;
    postgres)
      pgs=(/usr/lib/postgresql/*/bin)
      pg=${pgs[-1]}
      data=$out/pgdata
      if [ ! -d "$data" ]; then
        install -d -o postgres -g postgres "$data"
        runuser -u postgres -- "$pg/initdb" -D "$data" >/dev/null
      fi
      bench postgres --user postgres --ready "$pg/pg_isready -q -h /tmp -p 5499" \
        -- "$pg/postgres" -D "$data" -p 5499 -k /tmp -c listen_addresses=
      ;;
    *) echo "bench-startup: unknown case $c" >&2; exit 2 ;;
  esac
done
echo "bench-startup: results in $out" >&2
