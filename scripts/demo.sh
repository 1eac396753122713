#!/usr/bin/env bash
# The main job: build hugetext, build a real program with 20 MiB of text, and
# show end to end how its text is backed before and after hugetext works on it.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/install-deps.sh
export PATH="$HOME/.cargo/bin:$PATH"
cargo build --release --workspace --locked
bash tests/fixtures/mkfixtures.sh target/fixtures >/dev/null
ht=target/release/hugetext
prog=target/fixtures/bfd/pie

echo "== hugetext doctor"
$ht doctor || true

echo "== a running instance of $prog, text as the kernel loaded it"
coproc P { exec "$prog" wait; }
read -r _ <&"${P[0]}"; read -r _ <&"${P[0]}"
$ht inspect --pid "$P_PID"
exec {P[1]}>&-; wait "$P_PID" || true
