# shellcheck shell=bash
# A private apt configuration for Debian's suites that carry the kernels and
# their sources (bookworm, bookworm-security, trixie-backports, bullseye):
# lists and cache under $aptd; the system's sources list is never read or
# changed. Sourced by scripts/kernel-matrix.sh and scripts/kernel-lab.sh,
# which set aptd and define say and die first. Its lists are refreshed once a
# day (the newest package of a series).
#
#   debian_apt_ready                 the lists, fetched when missing or old
#   debian_apt ARGS...               apt-get with the private configuration
#   debian_apt_cache ARGS...         apt-cache with the private configuration
apt_opts=(-o "Dir::Etc::SourceList=$aptd/sources.list" -o "Dir::Etc::SourceParts=$aptd/sources.list.d"
  -o "Dir::State::Lists=$aptd/lists" -o "Dir::Cache=$aptd/cache"
  -o "Dir::Etc::Preferences=$aptd/preferences" -o "Dir::Etc::PreferencesParts=$aptd/preferences.d"
  -o "APT::Sandbox::User=root")
apt_sources() {
  local key=/usr/share/keyrings/debian-archive-keyring.gpg mirror=${HT_DEBIAN_MIRROR:-http://deb.debian.org}
  printf 'deb [arch=amd64,arm64 signed-by=%s] %s/%s %s main\n' \
    "$key" "$mirror" debian bookworm "$key" "$mirror" debian-security bookworm-security \
    "$key" "$mirror" debian trixie-backports "$key" "$mirror" debian bullseye \
    "$key" "$mirror" debian-security bullseye-security
}
debian_apt_ready() {
  mkdir -p "$aptd"/{sources.list.d,preferences.d,lists/partial,cache/archives/partial}
  if [ "$(apt_sources)" != "$(cat "$aptd/sources.list" 2>/dev/null)" ] ||
     [ -z "$(find "$aptd/lists" -maxdepth 1 -name '*Packages*' -mmin -1440 -print -quit)" ]; then
    apt_sources > "$aptd/sources.list"
    say "apt-get update (private configuration: ${aptd#"$repo"/})"
    apt-get "${apt_opts[@]}" update -qq >&2 ||
      [ -n "$(find "$aptd/lists" -maxdepth 1 -name '*Packages*' -print -quit)" ] ||
      die "apt-get update of the kernel suites failed (no network?)"
  fi
}
debian_apt() { apt-get "${apt_opts[@]}" "$@"; }
debian_apt_cache() { apt-cache "${apt_opts[@]}" "$@"; }
