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
# The kernel patch series (kernel/6.12/, kernel/7.x/): each applies to
# Debian's packaged source (linux-source-6.12, linux-source-7.3), is clean
# under checkpatch --strict, and the files it changes compile for x86-64 and
# arm64 (doc/kernel.md; the full build, boot and measurement is
# scripts/kernel-lab.sh).
bash scripts/kernel-lab.sh --check
# The kernel matrix's CI cells (tests/vm/README.md says why these):
# Debian 13's newest 7.x on ext4 (the common new setup: large folios on
# ext4, MADV_COLLAPSE of file text) and Debian 12's 6.1 on xfs (the oldest
# kernel with large folios, smaps and page-table fallbacks), THP always and
# madvise, in qemu (scripts/kernel-matrix.sh --all runs every cell, 5.10 too).
bash scripts/kernel-matrix.sh --cell 7.x:ext4 --cell 6.1:xfs
# The aarch64 leg's CI cell: the workspace cross-built for
# aarch64-unknown-linux-gnu, its tests run unmodified in Debian's newest 7.x
# arm64 cloud kernel (4 KiB pages, 64 KiB exec folios) on xfs, THP always,
# under qemu-system-aarch64 (scripts/kernel-matrix.sh --arm64 runs every
# arm64 cell, 16 KiB pages and 6.12 too).
bash scripts/kernel-matrix.sh --cell 7.x-arm64:xfs --thp always
