# shellcheck shell=bash
# repo, cache and aptd are set by the script that sources this:
# shellcheck disable=SC2154
# Debian's kernel source packages (linux-source-VERSION), fetched with the
# private apt configuration of scripts/lib/debian-apt.sh and cached in
# $cache. Sourced by scripts/kernel-lab.sh and scripts/kernel-64k.sh, which set
# repo, cache and aptd, define say and die, and source debian-apt.sh first.
#
#   source_tarball VERSION   the path of the cached linux-source-VERSION tarball
#   unpack TARBALL DIR       a fresh tree of that source in DIR
#   first_error LOG          the first compiler or make error in LOG

source_tarball() { # VERSION -> the path of the cached linux-source-VERSION tarball
  local v=$1 deb tb
  # the newest download: Debian package file names, sorted by time
  # shellcheck disable=SC2012
  deb=$(ls -t "$cache"/linux-source-"$v"_*.deb 2> /dev/null | head -n 1 || true)
  if [ -z "$deb" ]; then
    # A tarball taken out of an earlier download is enough.
    # the newest download: Debian package file names, sorted by time
    # shellcheck disable=SC2012
    tb=$(ls -t "$cache"/linux-source-"$v"_*.tar.xz 2> /dev/null | head -n 1 || true)
    if [ -n "$tb" ] && [ -s "$tb" ]; then echo "$tb"; return 0; fi
    say "fetching linux-source-$v with apt (private configuration: ${aptd#"$repo"/})"
    debian_apt_ready
    (cd "$cache" && debian_apt download -q "linux-source-$v" > /dev/null 2>&1) ||
      die "apt-get download linux-source-$v failed (no network, or no such package in ${aptd#"$repo"/}/sources.list)"
    # the newest download: Debian package file names, sorted by time
    # shellcheck disable=SC2012
    deb=$(ls -t "$cache"/linux-source-"$v"_*.deb | head -n 1)
  fi
  tb=$cache/$(basename "$deb" .deb).tar.xz
  if [ ! -s "$tb" ]; then
    dpkg-deb --fsys-tarfile "$deb" | tar -xO "./usr/src/linux-source-$v.tar.xz" > "$tb.tmp" ||
      die "$deb holds no usr/src/linux-source-$v.tar.xz"
    mv "$tb.tmp" "$tb"
  fi
  echo "$tb"
}

unpack() { # TARBALL DIR: a fresh tree in DIR
  rm -rf "$2" "$2.tmp" && mkdir -p "$2.tmp"
  tar -xf "$1" -C "$2.tmp" || die "unpacking $1 failed"
  mv "$2.tmp"/linux-source-* "$2" && rmdir "$2.tmp"
}

first_error() { # LOG: the first compiler or make error in LOG
  grep -m 1 -E 'error:|Error [0-9]+|No rule to make target' "$1" | sed 's/^ *//' || tail -n 1 "$1"
}
