#!/usr/bin/env bash
# The test command on a fresh machine, as CI meets it: a new Debian 12 root
# (debootstrap --variant=minbase, nothing installed, nothing cached) with a clean clone
# of this checkout's HEAD, `bash .ci/run` run inside it (chroot, as root), its time
# printed. A fair stand-in for a new 2-core CI machine (docs/testing.md, "The test
# command's time"). Needs root, debootstrap and the network the packages come from.
# Usage: scripts/cold-run.sh [DIR]   (DIR, default /var/tmp/fg-cold, is removed first)
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-/var/tmp/fg-cold}"
[ "$(id -u)" -eq 0 ] || { echo "needs root" >&2; exit 1; }
command -v debootstrap >/dev/null || { echo "needs debootstrap (apt-get install debootstrap)" >&2; exit 1; }
mounts=(proc sys dev dev/pts)
unmount() {
  for ((i = ${#mounts[@]} - 1; i >= 0; i--)); do umount -l "$dir/root/${mounts[$i]}" 2>/dev/null || true; done
}
trap unmount EXIT
unmount
rm -rf "$dir"
mkdir -p "$dir"
echo "== debootstrap --variant=minbase bookworm $dir/root"
debootstrap --variant=minbase bookworm "$dir/root" >"$dir/debootstrap.log" 2>&1 || { tail -20 "$dir/debootstrap.log"; exit 1; }
# The archive this machine uses, as Debian's own image lists it (bookworm, -updates, -security).
if [ -f /etc/apt/sources.list.d/debian.sources ]; then
  cp /etc/apt/sources.list.d/debian.sources "$dir/root/etc/apt/sources.list.d/"
  rm -f "$dir/root/etc/apt/sources.list"
fi
cp /etc/resolv.conf "$dir/root/etc/resolv.conf"
# The root a mount point of its own, as a machine's / is (buildah's layer commits make
# / private, which needs one).
mount --bind "$dir/root" "$dir/root"
mounts=("" "${mounts[@]}")
mount -t proc proc "$dir/root/proc"
mount -t sysfs sys "$dir/root/sys"
mount --bind /dev "$dir/root/dev"
mount --bind /dev/pts "$dir/root/dev/pts"
# git is not in a minimal root: the clone is made here, the checkout copied in.
git clone -q . "$dir/root/floodgate"
echo "== bash .ci/run in $dir/root/floodgate (chroot), from $(git rev-parse --short HEAD)"
start=$SECONDS
set +e
chroot "$dir/root" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
  CI=true bash -c 'cd /floodgate && bash .ci/run' 2>&1 | tee "$dir/run.log"
status=${PIPESTATUS[0]}
set -e
echo "== cold run: exit $status after $((SECONDS - start)) s (log: $dir/run.log)"
exit "$status"
