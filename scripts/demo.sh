#!/usr/bin/env bash
# The main job, end to end on a real program: build hugetext, build a program
# with 20 MiB of text linked by lld (whose layout can never be PMD-mapped as
# linked), and show its text backing at each step:
#   as the kernel loads it  ->  check  ->  align  ->  warm  ->  PMD-mapped
# then `hugetext run` on the unaligned original, and a short run of the exec-readahead microbenchmark.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/install-deps.sh
export PATH="$HOME/.cargo/bin:$PATH"
cargo build --release --workspace --locked
bash tests/fixtures/mkfixtures.sh target/fixtures >/dev/null

ht=$PWD/target/release/hugetext
demo=$PWD/target/demo
rm -rf "$demo"; mkdir -p "$demo"
cp target/fixtures/lld/pie "$demo/prog"          # lld: vaddr - offset = 0x1000
cp target/fixtures/lld/pie "$demo/prog-original"

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

# Start "$@ wait", wait for it to be ready, inspect its text, stop it.
inspect_running() {
  local out="$demo/out.$RANDOM" pid
  mkfifo "$out.in"
  "$@" wait <"$out.in" >"$out" &
  pid=$!
  exec {keep}>"$out.in"
  for _ in $(seq 100); do grep -q ready "$out" 2>/dev/null && break; sleep 0.05; done
  head -1 "$out"
  "$ht" inspect --pid "$pid"
  exec {keep}>&-
  wait "$pid" || true
  rm -f "$out" "$out.in"
}

step "hugetext doctor: what this kernel can do"
"$ht" doctor

step "hugetext check: the program as lld linked it"
"$ht" check "$demo/prog"

step "as the kernel loads it: text faulted in by exec readahead"
# Write back and evict the copy's page cache, so exec faults fill it as usual.
python3 -c 'import os,sys; fd=os.open(sys.argv[1],os.O_RDONLY); os.fsync(fd); os.posix_fadvise(fd,0,0,os.POSIX_FADV_DONTNEED)' "$demo/prog"
inspect_running "$demo/prog"

step "hugetext align: pad the text so p_offset = p_vaddr (mod 2 MiB), p_align = 2 MiB"
"$ht" align "$demo/prog"
"$ht" check "$demo/prog"

step "hugetext warm: page cache of the text in PMD-sized folios"
"$ht" warm "$demo/prog"

step "the aligned, warmed program: text PMD-mapped, zero copy, shared"
inspect_running "$demo/prog"

step "hugetext run on the unaligned original: text remapped at start"
HUGETEXT_VERBOSE=1 inspect_running "$ht" run -v -- "$demo/prog-original"

step "hugetext bench exec: the exec-readahead microbenchmark of the Linux 'large folios for exec memory' patches, 256 MiB, 5 interleaved runs, ratios with 95% CIs"
"$ht" bench exec --size 256M --runs 5 --dir "$demo"
