#!/usr/bin/env bash
# Build the hugetext container image without a registry and load it into
# (rootful) podman: a Debian root made by mmdebstrap (minbase, the host's
# release and mirrors) with the project's .deb installed by apt, so the
# image holds exactly the .deb and what it depends on. No apt lists, docs,
# man pages or locales (as in Debian's -slim images); the examples under
# /usr/share/doc/hugetext/examples stay.
#
#   bash scripts/build-image.sh            # build (or reuse) and load
#   bash scripts/build-image.sh --force    # rebuild even if up to date
#
# Tags: localhost/hugetext:VERSION and the image packaging/k8s/daemonset.yaml
# names, so `podman run` of the manifest's image works on this machine.
# The image is labelled with a hash of its inputs (the .deb's contents and
# dependencies, this script, the release); an image with the same hash is
# reused, not rebuilt. packaging/k8s/Containerfile builds the same contents
# for those who build with a registry at hand.
set -euo pipefail
cd "$(dirname "$0")/.."
force=0
[ "${1:-}" = "--force" ] && force=1
export PATH="$HOME/.cargo/bin:$PATH"
for t in podman mmdebstrap cargo-deb; do
  command -v "$t" >/dev/null 2>&1 || { echo "build-image: $t not found (scripts/install-deps.sh --containers)" >&2; exit 1; }
done
[ "$(id -u)" -eq 0 ] || { echo "build-image: needs root (rootful podman, mmdebstrap in root mode)" >&2; exit 1; }

version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
manifest_image=$(sed -n 's/^ *image: *//p' packaging/k8s/daemonset.yaml | head -1)
# the host's own release file, read at run time
# shellcheck disable=SC1091
suite=$(. /etc/os-release && echo "${VERSION_CODENAME:?}")
tag="localhost/hugetext:$version"

work=$(mktemp -d "${TMPDIR:-/tmp}/hugetext-image.XXXXXX")
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"  # apt reads the local .deb as _apt

if ! [ -x target/release/hugetext ] || ! [ -f target/release/libhugetext.so ]; then
  cargo build --release --locked -p hugetext-cli -p hugetext-preload
fi
# Stripped: the debug info the release build keeps is 30 MiB of the binary.
cargo deb -p hugetext-cli --no-build --fast --strip --output "$work/hugetext.deb" >/dev/null
deb="$work/hugetext.deb"

# The inputs' hash: the files the .deb installs (contents, not mtimes), its
# control data, this script and the Debian release.
mkdir "$work/x"
dpkg-deb -x "$deb" "$work/x"
hash=$( { (cd "$work/x" && find . -type f -print0 | sort -z | xargs -0 sha256sum);
          dpkg-deb -f "$deb" Package Version Depends;
          sha256sum scripts/build-image.sh; echo "$suite"; } | sha256sum | cut -c1-16)
have=$(podman image inspect "$tag" --format '{{ index .Labels "org.hugetext.inputs" }}' 2>/dev/null || true)
if [ "$force" = 0 ] && [ "$have" = "$hash" ]; then
  echo "build-image: $tag is up to date (inputs $hash)" >&2
  [ -z "$manifest_image" ] || podman tag "$tag" "$manifest_image"
  exit 0
fi

# mmdebstrap installs the .deb's dependencies from the mirror, then the .deb
# itself with dpkg in the new root (apt cannot reach a local file from the
# chroot); the dpkg path filters keep docs and locales out. The merged-usr
# hook makes the /usr symlinks itself, as debootstrap and Debian's images do,
# instead of installing usrmerge (which brings 47 MiB of perl).
deps=$(dpkg-deb -f "$deb" Depends | tr ',' '\n' | sed 's/[(|].*//; s/ //g' | grep . | sort -u | paste -sd, -)
echo "build-image: mmdebstrap --variant=minbase $suite + hugetext_$version.deb" >&2
# The hooks are shell commands mmdebstrap runs with "$1" set to the root:
# single-quoted so that they expand there, not here.
# shellcheck disable=SC2016
mmdebstrap --variant=minbase --mode=root \
  --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
  --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-include=/usr/share/doc/hugetext/examples/*' \
  --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/info/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-include=/usr/share/locale/locale.alias' \
  --dpkgopt='path-exclude=/usr/share/lintian/*' \
  ${deps:+--include="$deps"} \
  --customize-hook="copy-in $deb /tmp" \
  --customize-hook='chroot "$1" dpkg -i /tmp/hugetext.deb && rm "$1"/tmp/hugetext.deb' \
  --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/log/*.log "$1"/var/log/apt/*' \
  "$suite" "$work/root.tar" 2>"$work/mmdebstrap.log" || { tail -30 "$work/mmdebstrap.log" >&2; exit 1; }

podman import \
  --change 'ENTRYPOINT ["/usr/bin/hugetext"]' \
  --change 'CMD ["agent", "--listen", "0.0.0.0:9437"]' \
  --change 'EXPOSE 9437' \
  --change "LABEL org.hugetext.inputs=$hash" \
  --change "LABEL org.opencontainers.image.version=$version" \
  --message "hugetext $version: scripts/build-image.sh" \
  "$work/root.tar" "$tag" >/dev/null
[ -z "$manifest_image" ] || podman tag "$tag" "$manifest_image"
size=$(podman image inspect "$tag" --format '{{.Size}}')
echo "build-image: $tag loaded ($((size / 1024 / 1024)) MiB, inputs $hash)" >&2
