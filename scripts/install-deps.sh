#!/usr/bin/env bash
# Install what hugetext's build, tests and demo need on a fresh Debian machine.
# Idempotent: packages already present are not reinstalled.
set -euo pipefail
pkgs=(gcc binutils lld mold xfsprogs btrfs-progs e2fsprogs hyperfine linux-perf util-linux procps libcap2-bin mount python3 perl git bsdutils
      qemu-system-x86 busybox-static kmod cpio xz-utils zstd
      make flex bison bc libelf-dev libssl-dev)
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
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if ! command -v cargo >/dev/null 2>&1; then
  for d in "$HOME/.cargo/bin" /usr/local/cargo/bin; do
    [ -x "$d/cargo" ] && export PATH="$d:$PATH"
  done
fi
command -v cargo >/dev/null 2>&1 || { echo "install-deps: cargo not found; install Rust (rustup) first" >&2; exit 1; }
