#!/usr/bin/env bash
# The test command: install what is needed, build everything, build the ELF
# fixtures, and run the whole test suite against the real kernel.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/install-deps.sh
export PATH="$HOME/.cargo/bin:$PATH"
cargo build --release --workspace --locked
bash tests/fixtures/mkfixtures.sh target/fixtures
cargo test --release --workspace --locked -- --test-threads=2
# The kernel patch series (kernel/6.12/): it applies to Debian's packaged
# linux-source-6.12 and the files it changes compile (doc/kernel.md; the
# full build, boot and measurement is scripts/kernel-lab.sh).
bash scripts/kernel-lab.sh --check
# The kernel matrix's CI cell: Debian 6.1 on xfs, THP always and madvise,
# in qemu (scripts/kernel-matrix.sh --all runs every cell; doc/kernels.md).
bash scripts/kernel-matrix.sh
# The aarch64 leg's CI cell: the workspace cross-built for
# aarch64-unknown-linux-gnu, its tests run unmodified in Debian 6.12's arm64
# cloud kernel (4 KiB pages) on xfs, THP always, under qemu-system-aarch64
# (scripts/kernel-matrix.sh --arm64 runs every arm64 cell, 16 KiB pages too).
bash scripts/kernel-matrix.sh --cell 6.12-arm64:xfs --thp always
