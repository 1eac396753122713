#!/usr/bin/env bash
# Build the container tests' workload image and load it into (rootful)
# podman: a root of a few files, without hugetext: an aligned program from
# the ELF fixtures (/fixture, 20 MiB of text), sleep, and the loader and
# libc they need, copied from this host. Its files are an image layer, so
# every container of it maps the same layer files through its own overlayfs
# mount. No registry, no mirror.
#
#   bash scripts/build-workload-image.sh [FIXTURES_DIR]   # default target/fixtures
#
# Tag: localhost/hugetext-workload:test. Labelled with a hash of its inputs;
# an image with the same hash is reused, not rebuilt. Prints the tag.
set -euo pipefail
cd "$(dirname "$0")/.."
fixtures=${1:-target/fixtures}
tag=localhost/hugetext-workload:test
command -v podman >/dev/null 2>&1 || { echo "build-workload-image: podman not found (scripts/install-deps.sh --containers)" >&2; exit 1; }
[ -x "$fixtures/bfd/nopie" ] || { echo "build-workload-image: no $fixtures/bfd/nopie (bash tests/fixtures/mkfixtures.sh $fixtures)" >&2; exit 1; }

sleep_bin=$(command -v sleep)
files=("$fixtures/bfd/nopie:/fixture" "$sleep_bin:/sleep")
# The loader and the libraries both programs need, at the paths they name.
while read -r lib; do
  files+=("$lib:$lib")
done < <(ldd "$fixtures/bfd/nopie" "$sleep_bin" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\/.*[^:]$/ { print $1 }' | sort -u)

hash=$( { for f in "${files[@]}"; do echo "${f#*:}"; sha256sum < "$(readlink -f "${f%%:*}")"; done;
          sha256sum scripts/build-workload-image.sh; } | sha256sum | cut -c1-16)
have=$(podman image inspect "$tag" --format '{{ index .Labels "org.hugetext.inputs" }}' 2>/dev/null || true)
if [ "$have" = "$hash" ]; then
  echo "$tag"
  exit 0
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/hugetext-workload.XXXXXX")
trap 'rm -rf "$work"' EXIT
for f in "${files[@]}"; do
  dst="$work/root${f#*:}"
  mkdir -p "$(dirname "$dst")"
  cp -L "${f%%:*}" "$dst"
done
tar -C "$work/root" -cf "$work/root.tar" .
podman import --quiet \
  --change 'ENTRYPOINT ["/fixture"]' \
  --change "LABEL org.hugetext.inputs=$hash" \
  --message "hugetext container tests' workload" \
  "$work/root.tar" "$tag" >/dev/null
# The layer was just written: flush it, so that its page cache is clean and
# can be evicted and refilled (warm).
sync
echo "$tag"
