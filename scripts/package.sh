#!/usr/bin/env bash
# The Debian package, from the release build (no second compile):
# build/package/floodgate_<version>_<arch>.deb with /usr/bin/floodgate, the default
# configuration /etc/floodgate/floodgate.yaml (a conffile: kept on upgrade), the systemd
# unit (packaging/floodgate.service), the logrotate file, the man page (help2man from
# --help), the licence, and the maintainer scripts (a system user floodgate; the unit
# enabled and started as debhelper would). Prints the package's path.
# Usage: scripts/package.sh   (builds release first if needed)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh package >&2
[ -x build/src/floodgate ] || scripts/build.sh release floodgate >&2
bin=build/src/floodgate
version="$("$bin" --version | awk '{print $2}')"
arch="$(dpkg --print-architecture)"
out=build/package
root="$out/root"
rm -rf "$out"
mkdir -p "$root/DEBIAN" "$root/usr/bin" "$root/usr/share/doc/floodgate" "$root/usr/share/man/man1"

# (stripped of debug sections: the package's binary, as Debian ships its own)
strip --strip-unneeded --remove-section=.comment --remove-section=.note -o "$root/usr/bin/floodgate" "$bin"
chmod 0755 "$root/usr/bin/floodgate"
install -D -m 0644 packaging/floodgate.yaml "$root/etc/floodgate/floodgate.yaml"
install -D -m 0644 packaging/floodgate.service "$root/lib/systemd/system/floodgate.service"
install -D -m 0644 packaging/floodgate.logrotate "$root/etc/logrotate.d/floodgate"
help2man --no-info --no-discard-stderr --version-string="$version" \
  --name="a rate-limiting HTTP reverse proxy with its counters in Redis" "$bin" | gzip -9n \
  >"$root/usr/share/man/man1/floodgate.1.gz"
cat >"$root/usr/share/doc/floodgate/copyright" <<EOF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: floodgate

Files: *
Copyright: 2026 the floodgate authors
License: Apache-2.0
 On Debian systems the full text of the Apache License, Version 2.0 is in
 /usr/share/common-licenses/Apache-2.0.
EOF
date="$(git log -1 --format=%cD 2>/dev/null || date -R)"
{
  echo "floodgate ($version) unstable; urgency=medium"
  echo
  echo "  * Built from $(git rev-parse --short HEAD 2>/dev/null || echo 'a source tree')."
  echo
  echo " -- floodgate maintainers <maintainers@floodgate.dev>  $date"
} | gzip -9n >"$root/usr/share/doc/floodgate/changelog.gz"
chmod 0644 "$root/usr/share/doc/floodgate/"*

# The shared libraries the binary links, as Debian package dependencies.
shlib="$(mktemp -d)"
trap 'rm -rf "$shlib"' EXIT
mkdir -p "$shlib/debian"
printf 'Source: floodgate\n\nPackage: floodgate\nArchitecture: any\n' >"$shlib/debian/control"
depends="$(cd "$shlib" && dpkg-shlibdeps -O "$OLDPWD/$root/usr/bin/floodgate" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')"
[ -n "$depends" ] || { echo "dpkg-shlibdeps found no dependencies" >&2; exit 1; }
cat >"$root/DEBIAN/control" <<EOF
Package: floodgate
Version: $version
Architecture: $arch
Maintainer: floodgate maintainers <maintainers@floodgate.dev>
Installed-Size: $(du -sk --exclude=DEBIAN "$root" | cut -f1)
Depends: $depends, adduser, tzdata, ca-certificates
Section: net
Priority: optional
Description: rate-limiting HTTP reverse proxy with its counters in Redis
 floodgate stands in front of existing HTTP APIs and limits their traffic:
 fixed and sliding windows, token buckets, GCRA and concurrency limits per
 client address, header, query, cookie or API key, with plans and calendar
 quotas. Its counters live in the process, or in Redis (standalone, Sentinel
 or Cluster) so that any number of gateways enforce one shared limit.
EOF
printf '/etc/floodgate/floodgate.yaml\n/etc/logrotate.d/floodgate\n' >"$root/DEBIAN/conffiles"
install -m 0755 packaging/postinst packaging/prerm packaging/postrm "$root/DEBIAN/"
(cd "$root" && find . -type f ! -path './DEBIAN/*' -printf '%P\0' | sort -z | xargs -0 md5sum) >"$root/DEBIAN/md5sums"
deb="$out/floodgate_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >&2
echo "$deb"
