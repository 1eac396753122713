#!/usr/bin/env bash
# The cost of `hugetext run` on real programs' start-up, and the build of
# many small files (doc/bench.md, "bench startup"): each case is one
# `hugetext bench startup` run (plain, warm, and run with every route,
# paired and interleaved). Needs root; clang, python3-numpy, nodejs,
# postgresql, mariadb-server and chromium (scripts/install-deps.sh installs
# them).
#
#   scripts/bench-startup.sh [CASE...]
#     CASE: build clang numpy node postgres mariadb chromium (default: all)
#   RUNS=20 OUT=dir JSON=1 scripts/bench-startup.sh build      (JSON=1: --json)
#   ROUTES=auto,file,shmem,copy CACHE=huge scripts/bench-startup.sh node
#     (ROUTES: bench startup --routes; CACHE: --run-cache. With shmem among
#     the routes, each case's programs are first copied into a text store of
#     the run's own, $OUT/store, by `hugetext warm --shmem --deps`.)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
ht=${HUGETEXT:-$here/target/release/hugetext}
runs=${RUNS:-10}
out=${OUT:-$(mktemp -d /tmp/hugetext-bench-startup.XXXXXX)}
mkdir -p "$out"
chmod go+x "$out"  # the servers' users reach their data directories
cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=(build clang numpy node postgres mariadb chromium)
opts=(--runs "$runs")
[ -z "${ROUTES:-}" ] || opts+=(--routes "$ROUTES")
[ -z "${CACHE:-}" ] || opts+=(--run-cache "$CACHE")
# The shmem route maps text from a store: one of this run's own (never the
# system's /run/hugetext/text, which others may fill or drop).
export HUGETEXT_STORE=$out/store
store() { # PROGRAM...: their text, and their libraries', into the store
  case ,${ROUTES:-shmem}, in
    *,shmem,*)
      # Only 2 MiB-aligned files with whole windows are stored (see
      # `hugetext check`); for the others the shmem route has nothing to map.
      "$ht" warm --shmem --deps --store "$HUGETEXT_STORE" "$@" >/dev/null 2>&1 ||
        echo "bench-startup: the store holds nothing of $*: unaligned (hugetext align) or no whole window" >&2 ;;
  esac
}
bench() { # NAME ARGS...
  local name=$1; shift
  echo "== $name: hugetext bench startup ${opts[*]} $*" >&2
  "$ht" bench startup "${opts[@]}" ${JSON:+--json} "$@" | tee "$out/$name.$([ -n "${JSON:-}" ] && echo json || echo md)"
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
      store "$(readlink -f "$(command -v clang)")"
      (cd "$src" && bench build -- clang -O2 -c "${files[@]}")
      ;;
    clang) store "$(readlink -f "$(command -v clang)")"; bench clang -- clang --version ;;
    numpy)
      # Debian's python3 and python3-numpy (a pyenv shim first on PATH would
      # add its own start-up).
      store /usr/bin/python3
      bench numpy -- /usr/bin/python3 -c 'import numpy'
      ;;
    node) store "$(readlink -f "$(command -v node)")"; bench node -- node -e 0 ;;
    postgres)
      pgs=(/usr/lib/postgresql/*/bin)
      pg=${pgs[-1]}
      data=$out/pgdata
      if [ ! -d "$data" ]; then
        install -d -o postgres -g postgres "$data"
        runuser -u postgres -- "$pg/initdb" -D "$data" >/dev/null
      fi
      store "$pg/postgres"
      # postgres writes "ready" into postmaster.pid once it accepts
      # connections: read by the bench, no probe process.
      bench postgres --user postgres --ready-file "$data/postmaster.pid" $'\nready' \
        -- "$pg/postgres" -D "$data" -p 5499 -k /tmp -c listen_addresses=
      ;;
    mariadb)
      # mysqld_safe to a server that answers a ping on its socket. mysqld_safe
      # ignores SIGTERM: `serve` stops the server with mariadb-admin.
      d=$out/mariadb
      if [ ! -d "$d/data" ]; then
        install -d -o mysql -g mysql "$d"
        runuser -u mysql -- mariadb-install-db --no-defaults --datadir="$d/data" --skip-test-db >/dev/null
      fi
      cat > "$d/serve" <<SERVE
#!/bin/sh
trap 'mariadb-admin --no-defaults -S $d/sock shutdown' TERM
mysqld_safe --no-defaults --datadir=$d/data --socket=$d/sock --skip-networking \\
  --pid-file=$d/pid --log-error=$d/err.log --user=mysql &
wait
wait
SERVE
      chmod 755 "$d/serve"
      store /usr/sbin/mariadbd
      bench mariadb --ready-file "$d/err.log" "ready for connections" -- "$d/serve"
      ;;
    chromium)
      # Through Debian's wrapper script /usr/bin/chromium; as root chromium
      # needs --no-sandbox.
      store /usr/lib/chromium/chromium
      bench chromium -- chromium --headless --no-sandbox --dump-dom about:blank
      ;;
    *) echo "bench-startup: unknown case $c" >&2; exit 2 ;;
  esac
done
echo "bench-startup: results in $out" >&2
