#!/usr/bin/env bash
# Builds the container image the worker's image tests run in (issue 27):
# a Debian bookworm minbase rootfs made by debootstrap, with a marker file
# the tests look for, packed as a tarball for `podman import`. Cached in
# $RLSCHED_CACHE_DIR (default ~/.cache/rlsched) under a name keyed by this
# script, so CI builds it once; prints the tarball's path.
# Cold: ≈ 1-3 min (the Debian mirror); warm: nothing.
set -euo pipefail
cache="${RLSCHED_CACHE_DIR:-$HOME/.cache/rlsched}"
key=$(sha256sum "$0" | cut -c1-12)
tar="$cache/test-image-bookworm-$key.tar"
if [ ! -s "$tar" ]; then
  command -v debootstrap >/dev/null || { echo "test-image.sh: no debootstrap (Debian package debootstrap)" >&2; exit 1; }
  mkdir -p "$cache"
  root=$(mktemp -d "$cache/test-image-root.XXXXXX")
  trap 'rm -rf "$root" "$tar.tmp"' EXIT
  debootstrap --variant=minbase bookworm "$root" "${DEBIAN_MIRROR:-http://deb.debian.org/debian}" >&2
  chmod 755 "$root" # mktemp's 0700 would be the image's /, which no run's uid could enter
  echo "rlsched-test-image bookworm" > "$root/etc/rlsched-test-image"
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  tar -C "$root" --numeric-owner -cf "$tar.tmp" .
  mv "$tar.tmp" "$tar"
fi
echo "$tar"
