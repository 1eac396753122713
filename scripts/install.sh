#!/usr/bin/env bash
# Install a release build of hugetext.
#
#   scripts/install.sh [--prefix PREFIX] [--destdir DIR] [--systemd]
#
# PREFIX (default /usr/local) gets:
#   bin/hugetext                      the command
#   lib/libhugetext.so                the preload + C API (-lhugetext)
#   lib/hugetext/libhugetext.so       link: where `hugetext run` looks first
#   include/hugetext.h                the C API
#   share/man/man1/hugetext.1         the man page (all subcommands)
#   share/doc/hugetext/               README and doc/*.md
#   share/hugetext/                   systemd units, apt hook, example warm.conf
# --systemd also installs the units into /etc/systemd/system (under DESTDIR),
# with ExecStart pointing at PREFIX/bin/hugetext.
# Builds with `cargo build --release` first if the build is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=/usr/local destdir='' systemd=0
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) prefix=$2; shift 2 ;;
    --destdir) destdir=$2; shift 2 ;;
    --systemd) systemd=1; shift ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "install.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
# build unless both are there: the build is meant to run when either test fails
# shellcheck disable=SC2015
[ -x target/release/hugetext ] && [ -f target/release/libhugetext.so ] || cargo build --release --workspace --locked
root=$destdir$prefix
install -Dm755 target/release/hugetext "$root/bin/hugetext"
install -Dm755 target/release/libhugetext.so "$root/lib/libhugetext.so"
mkdir -p "$root/lib/hugetext"
ln -sfn ../libhugetext.so "$root/lib/hugetext/libhugetext.so"
install -Dm644 include/hugetext.h "$root/include/hugetext.h"
install -Dm644 doc/hugetext.1 "$root/share/man/man1/hugetext.1"
install -d "$root/share/doc/hugetext" "$root/share/hugetext"
install -m644 README.md doc/*.md "$root/share/doc/hugetext/"
cp -r packaging/. "$root/share/hugetext/"
sed -i "s|/usr/bin/hugetext|$prefix/bin/hugetext|g" "$root/share/hugetext/systemd/"*.service "$root/share/hugetext/apt/"* 2>/dev/null || true
if [ "$systemd" = 1 ]; then
  install -d "$destdir/etc/systemd/system"
  install -m644 "$root/share/hugetext/systemd/"* "$destdir/etc/systemd/system/"
  echo "install.sh: units in $destdir/etc/systemd/system; list programs in /etc/hugetext/warm.conf, then: systemctl enable --now hugetext-warm.service hugetext-warm.path" >&2
fi
echo "install.sh: installed into $root" >&2
