#!/usr/bin/env bash
# Install what hugetext's build, tests and demo need on a fresh Debian machine.
# Idempotent: packages already present are not reinstalled.
set -euo pipefail
# apt-get that waits for the dpkg and lists locks (another apt run, an
# unattended upgrade on a fresh machine) instead of failing on them.
apt_get() { apt-get -o DPkg::Lock::Timeout=1800 -o Acquire::Retries=3 "$@"; }
pkgs=(gcc binutils lld mold xfsprogs btrfs-progs e2fsprogs hyperfine linux-perf util-linux procps libcap2-bin mount python3 perl git bsdutils
      qemu-system-x86 busybox-static kmod cpio xz-utils zstd
      qemu-system-arm gcc-aarch64-linux-gnu binutils-aarch64-linux-gnu libc6-dev-arm64-cross
      make flex bison bc libelf-dev libssl-dev)
pkgs+=(strace systemd)  # tests/containers/agent_packaging.rs: the syscalls the agent makes, checked against the unit's SystemCallFilter (systemd-analyze)
pkgs+=(podman runc mmdebstrap)  # scripts/build-image.sh and tests/containers/daemonset_pod.rs: the image, run as the DaemonSet runs it (runc: crun refuses hybrid cgroups)
pkgs+=(gcc-aarch64-linux-gnu binutils-aarch64-linux-gnu qemu-user)  # tests/arm64.rs: cross-built AArch64 programs, run under qemu-user
pkgs+=(gcc-aarch64-linux-gnu gcc-powerpc64le-linux-gnu gcc-s390x-linux-gnu gcc-riscv64-linux-gnu)  # scripts/kernel-lab.sh --check: the kernel series' objects cross-compiled for arm64, ppc64el, s390x, riscv64; --package --arch arm64: the arm64 kernels
pkgs+=(rsync debhelper libdw-dev dpkg-dev)  # scripts/kernel-lab.sh --package: what make bindeb-pkg and its Build-Depends check need
pkgs+=(patch)  # scripts/kernel-lab.sh --lockstat: the series applied to its own (non-git) tree
pkgs+=(shellcheck)  # scripts/lint.sh
pkgs+=(clang python3-numpy)  # scripts/bench-startup.sh: the start-up cases (clang, numpy) and the build of many small files
pkgs+=(time)  # testkit::measured: GNU time reports a command's own peak memory
pkgs+=(gdb postgresql)  # explain.rs: a package's file (gdb's) gets the copy recipe; run.rs: pg_ctl start as a launcher run follows
pkgs+=(mariadb-server nodejs chromium)  # run.rs: mariadbd started by mysqld_safe; programs.rs: node's and chromium's processes under run; scripts/bench-startup.sh
missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: need root to install: ${missing[*]}" >&2
    exit 1
  fi
  echo "install-deps: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt_get update -qq
  apt_get install -y -qq "${missing[@]}" >/dev/null
  # mariadb-server and postgresql start their system services where systemd
  # runs; the tests and benchmarks start their own servers.
  if [ -d /run/systemd/system ]; then
    for s in mariadb postgresql; do systemctl disable --now "$s" >/dev/null 2>&1 || true; done
  fi
fi
if ! command -v cargo >/dev/null 2>&1; then
  for d in "$HOME/.cargo/bin" /usr/local/cargo/bin; do
    [ -x "$d/cargo" ] && export PATH="$d:$PATH"
  done
fi
command -v cargo >/dev/null 2>&1 || { echo "install-deps: cargo not found; install Rust (rustup) first" >&2; exit 1; }
# aarch64: the workspace cross-built for the kernel matrix's arm64 guests
# (scripts/kernel-matrix.sh --arm64), which are made of Debian's arm64
# packages (kernels, busybox-static, the programs the tests call), fetched
# there with apt-get download: dpkg must know the arm64 architecture.
if ! rustup target list --installed 2>/dev/null | grep -qx aarch64-unknown-linux-gnu; then
  command -v rustup >/dev/null 2>&1 || { echo "install-deps: rustup not found; the aarch64 target needs it" >&2; exit 1; }
  echo "install-deps: rustup target add aarch64-unknown-linux-gnu" >&2
  rustup target add aarch64-unknown-linux-gnu >/dev/null
fi
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  [ "$(id -u)" -eq 0 ] || { echo "install-deps: need root for dpkg --add-architecture arm64" >&2; exit 1; }
  echo "install-deps: dpkg --add-architecture arm64" >&2
  dpkg --add-architecture arm64
  apt_get update -qq
fi
# hugetext agent's tests: a real Prometheus server and its promtool (run by the test on
# 127.0.0.1 with its own config, never as a service), cargo-deb to build the
# .deb (about 4 minutes to compile when missing), and kubernetes-validate
# (the Kubernetes JSON schemas, offline) for the manifests.
if ! dpkg -s prometheus >/dev/null 2>&1; then
  [ "$(id -u)" -eq 0 ] || { echo "install-deps: need root to install prometheus" >&2; exit 1; }
  echo "install-deps: installing prometheus" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt_get install -y -qq --no-install-recommends prometheus >/dev/null || { apt_get update -qq && apt_get install -y -qq --no-install-recommends prometheus >/dev/null; }
  # The package starts a system service where systemd runs; the tests start their own.
  if [ -d /run/systemd/system ]; then systemctl disable --now prometheus >/dev/null 2>&1 || true; fi
fi
command -v cargo-deb >/dev/null 2>&1 || { echo "install-deps: cargo install --locked cargo-deb" >&2; cargo install --locked --quiet cargo-deb; }
# scripts/lint.sh: ruff (Python lint) is not packaged in Debian 12; from PyPI.
command -v ruff >/dev/null 2>&1 || { echo "install-deps: pip install ruff" >&2; python3 -m pip install --quiet 'ruff==0.17.*' 2>/dev/null || python3 -m pip install --quiet --break-system-packages 'ruff==0.17.*'; }
# scripts/lint.sh: rustfmt and clippy come with rustup's default profile, not its minimal one.
for c in rustfmt clippy; do
  rustup component list --installed 2>/dev/null | grep -q "^$c" || { echo "install-deps: rustup component add $c" >&2; rustup component add "$c" >/dev/null; }
done
command -v kubernetes-validate >/dev/null 2>&1 || { echo "install-deps: pip install kubernetes-validate" >&2; python3 -m pip install --quiet kubernetes-validate 2>/dev/null || python3 -m pip install --quiet --break-system-packages kubernetes-validate; }
# Objects loaded after start (crates/hugetext-cli/tests/cli/late_load.rs): a JDK
# (java, javac) and python3's numpy from PyPI (its wheel bundles OpenBLAS in
# numpy.libs/, dlopen'ed by `import numpy`).
late=()
for p in openjdk-17-jdk-headless python3-pip; do
  dpkg -s "$p" >/dev/null 2>&1 || late+=("$p")
done
if [ ${#late[@]} -gt 0 ] && [ "$(id -u)" -eq 0 ]; then
  echo "install-deps: installing ${late[*]}" >&2
  DEBIAN_FRONTEND=noninteractive apt_get install -y -qq "${late[@]}" >/dev/null ||
    { apt_get update -qq && DEBIAN_FRONTEND=noninteractive apt_get install -y -qq "${late[@]}" >/dev/null; }
fi
if ! python3 -c 'import numpy' >/dev/null 2>&1; then
  echo "install-deps: pip install numpy" >&2
  python3 -m pip install -q numpy 2>/dev/null || python3 -m pip install -q --break-system-packages numpy
fi
