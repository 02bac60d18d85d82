#!/usr/bin/env bash
# Makes the `debian:bookworm` base image in buildah's local storage, for machines that
# reach no image registry: debootstrap (minbase) into a folder, packed once into a
# tarball under $FG_IMAGE_CACHE, imported under the name a Dockerfile's
# `FROM debian:bookworm` resolves to. Cached: a second run finds the image (or the
# tarball) and does nothing (or only the import). Needs root, debootstrap and buildah.
set -euo pipefail
cache="${FG_IMAGE_CACHE:-/var/cache/floodgate-image}"
# Bump to remake the base (a new debootstrap) on every machine.
stamp="bookworm-minbase-1"
name="docker.io/library/debian:bookworm"
b=(buildah --storage-driver vfs)
mkdir -p "$cache"

if [ "$("${b[@]}" inspect --type image --format '{{index .Docker.Config.Labels "org.floodgate.base"}}' "$name" \
        2>/dev/null)" = "$stamp" ]; then
  exit 0
fi

tarball="$cache/$stamp.tar"
if [ ! -f "$tarball" ]; then
  echo "== base image: debootstrap --variant=minbase bookworm (once; cached in $tarball)"
  root="$(mktemp -d "$cache/rootfs.XXXXXX")"
  trap 'rm -rf "$root"' EXIT
  debootstrap --variant=minbase bookworm "$root" >"$cache/debootstrap.log" 2>&1 ||
    { tail -20 "$cache/debootstrap.log" >&2; exit 1; }
  # The archive this machine uses, as Debian's own image lists it (bookworm, -updates,
  # -security): the image then builds against the packages the host build had.
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    cp /etc/apt/sources.list.d/debian.sources "$root/etc/apt/sources.list.d/debian.sources"
    rm -f "$root/etc/apt/sources.list"
  fi
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  # mktemp made it 0700: the image's / would be too, and its non-root USER could run nothing.
  chmod 0755 "$root"
  tar -C "$root" --numeric-owner -cf "$tarball.part" .
  mv "$tarball.part" "$tarball"
  rm -rf "$root"
  trap - EXIT
fi

echo "== base image: importing $tarball as $name"
ctr="$("${b[@]}" from scratch)"
trap '"${b[@]}" rm "$ctr" >/dev/null 2>&1 || true' EXIT
"${b[@]}" add "$ctr" "$tarball" / >/dev/null
"${b[@]}" config --label "org.floodgate.base=$stamp" --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --cmd bash "$ctr"
"${b[@]}" commit --quiet --format docker "$ctr" "$name" >/dev/null
