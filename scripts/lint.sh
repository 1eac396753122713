#!/usr/bin/env bash
# The lint gate (scripts/test.sh runs it right after the build): rustfmt,
# clippy with warnings as errors (in release, reusing the build's
# dependencies), shellcheck on the shell scripts and ruff on the Python.
# Directives that silence a shellcheck finding say why on the line above.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all --check
cargo clippy --workspace --all-targets --release --locked -- -D warnings
shellcheck scripts/*.sh scripts/lib/*.sh tests/vm/*.sh tests/vm/count/*.sh tests/fixtures/*.sh
ruff check scripts/*.py tests/vm/*.py tests/vm/count/*.py
echo "lint: clean"
