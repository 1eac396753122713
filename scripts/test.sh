#!/usr/bin/env bash
# The test command: install what is needed, build everything, build the ELF
# fixtures, and run the whole test suite against the real kernel.
#
#   bash scripts/test.sh               # everything
#   bash scripts/test.sh --containers  # only the container part (a few minutes)
#
# The container part: scripts/build-image.sh builds the image (a Debian
# minbase root plus the .deb, reused while its inputs' hash is unchanged)
# into rootful podman, and the `containers` test binary runs it with the
# settings of packaging/k8s/daemonset.yaml (daemonset_pod::), warms and runs
# programs in containers (containers::, scripts/build-workload-image.sh); the
# agent's workload tests (cli, agent::workload_) select a unit's and a
# container's cgroup.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/install-deps.sh
export PATH="$HOME/.cargo/bin:$PATH"
if [ "${1:-}" = "--containers" ]; then
  cargo build --release --locked -p hugetext-cli -p hugetext-preload
  bash tests/fixtures/mkfixtures.sh target/fixtures
  bash scripts/build-image.sh
  cargo test --release --locked -p hugetext-cli --test containers -- --test-threads=2
  exec cargo test --release --locked -p hugetext-cli --test cli -- --test-threads=2 agent::workload_
fi
cargo build --release --workspace --locked
bash scripts/lint.sh
bash tests/fixtures/mkfixtures.sh target/fixtures
bash scripts/build-image.sh
cargo test --release --workspace --locked -- --test-threads=2
# The kernel patch series (kernel/6.12/, kernel/7.x/): each applies to
# Debian's packaged source (linux-source-6.12, linux-source-7.3), is clean
# under checkpatch --strict, and the files it changes compile for x86-64,
# arm64, ppc64el, s390x and riscv64 (doc/kernel.md; the full build, boot
# and measurement is scripts/kernel-lab.sh).
bash scripts/kernel-lab.sh --check
# The kernel matrix's CI cells, in qemu: x86-64 (Debian 13's 7.x on ext4,
# Debian 12's 6.1 on xfs), then aarch64 (7.x arm64 on xfs, the workspace
# cross-built), THP always; scripts/kernel-matrix.sh names them and
# tests/vm/README.md says why these (--all and --arm64 run every cell).
bash scripts/kernel-matrix.sh --ci
