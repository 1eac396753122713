#!/usr/bin/env bash
# The lint gate (scripts/test.sh runs it right after the build): rustfmt,
# clippy with warnings as errors (in release, reusing the build's
# dependencies), shellcheck on the shell scripts and ruff on the Python.
# Directives that silence a shellcheck finding say why on the line above.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all --check
cargo clippy --workspace --all-targets --release --locked -- -D warnings
# The audit module is built outside Cargo (crates/hugetext/build.rs): the
# same two gates, by hand.
audit=crates/hugetext-preload/audit/auditor.rs
rustfmt --edition 2021 --check "$audit" crates/hugetext-preload/audit/table.rs
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
clippy-driver --edition 2021 --crate-type cdylib --crate-name hugetext_audit -C panic=abort \
  -C link-arg=-nostdlib -D warnings -W clippy::undocumented_unsafe_blocks "$audit" -o "$scratch/audit.so"
shellcheck scripts/*.sh scripts/lib/*.sh tests/vm/*.sh tests/vm/count/*.sh tests/fixtures/*.sh
ruff check scripts/*.py tests/vm/*.py tests/vm/count/*.py
echo "lint: clean"
