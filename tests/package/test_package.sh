#!/usr/bin/env bash
# The Debian package (scripts/package.sh, from the release build), as an operator meets it:
#   lintian passes it (warnings are failures; tests/package/lintian-overrides says why
#   each remaining tag is expected); the unit's hardening is scored by systemd-analyze
#   security (offline) and must stay at or below 2.5 ("OK");
#   installed into a fresh Debian 12 root (the image test's base, debootstrap minbase)
#   with dpkg -i and apt-get -f install: the package is installed, the user floodgate
#   exists, the configuration is a conffile and passes --check; the binary, started
#   from the package as user floodgate (in a network namespace of its own), proxies a
#   request to an upstream, `floodgate --reload` (the unit's ExecReload) reloads it, and
#   SIGTERM ends it with exit 0.
# Usage (root): tests/package/test_package.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
cache="${FG_IMAGE_CACHE:-/var/cache/floodgate-image}"
fail() { echo "FAIL (package test): $*" >&2; exit 1; }
t0=$SECONDS
phase() { echo "== package test: $* (at $((SECONDS - t0))s)"; }

# ---- inside the network namespace: run the installed binary -------------------------
if [ "${1:-}" = "--run" ]; then
  root="$2"
  ip link set lo up
  python3 tests/integration/upstream.py >"$root/tmp/upstream.out" &
  up=$!
  trap 'kill $up 2>/dev/null || true' EXIT
  for _ in $(seq 100); do [ -s "$root/tmp/upstream.out" ] && break; sleep 0.05; done
  read -r _ port _ <"$root/tmp/upstream.out" || fail "the upstream did not start"
  # The package's own file, its upstream pointed at the test's, its log on stdout.
  sed -e "s/127.0.0.1:9000/127.0.0.1:$port/" -e 's|access_log: /var/log/floodgate/access.log|access_log: stdout|' \
    "$root/etc/floodgate/floodgate.yaml" >"$root/tmp/test.yaml"
  chmod 0644 "$root/tmp/test.yaml"
  # (setpriv execs the binary: the pid signalled is the gateway itself, as systemd would have it)
  chroot "$root" setpriv --reuid=floodgate --regid=floodgate --init-groups /usr/bin/floodgate --config /tmp/test.yaml \
    >"$root/tmp/gateway.log" 2>&1 &
  gw=$!
  for _ in $(seq 200); do grep -q "floodgate listening on" "$root/tmp/gateway.log" && break; sleep 0.05; done
  grep -q "floodgate listening on" "$root/tmp/gateway.log" || { cat "$root/tmp/gateway.log"; fail "the gateway did not start"; }
  [ "$(stat -c %u "/proc/$gw")" = "$(chroot "$root" id -u floodgate)" ] || fail "the gateway does not run as user floodgate"
  body="$(curl -sS --max-time 5 -H 'X-Test: package' http://127.0.0.1:8080/echo)" || fail "no answer through the gateway"
  case "$body" in *'"target": "/echo"'*|*'"target":"/echo"'*) ;; *) fail "the upstream did not get the request: $body" ;; esac
  out="$(chroot "$root" /usr/bin/floodgate --reload --config /tmp/test.yaml 2>&1)" || { cat "$root/tmp/gateway.log"; fail "--reload: $out"; }
  echo "   $out"
  kill -TERM "$gw"
  wait "$gw" || fail "the gateway exited with $? on SIGTERM: $(tail -5 "$root/tmp/gateway.log")"
  exit 0
fi

[ "$(id -u)" -eq 0 ] || fail "needs root (a chroot, a network namespace)"
phase "scripts/package.sh"
deb="$(scripts/package.sh | tail -1)"
[ -f "$deb" ] || fail "no package built"
echo "   $deb ($(du -k "$deb" | cut -f1) KiB)"
dpkg-deb --info "$deb" | sed -n 's/^ \(Depends\|Installed-Size\):/   \1:/p'

phase "lintian"
lintian --fail-on warning --tag-display-limit 0 --profile debian \
  --suppress-tags-from-file tests/package/lintian-overrides "$deb" || fail "lintian"

phase "systemd-analyze security --offline=true packaging/floodgate.service"
score="$(systemd-analyze security --offline=true packaging/floodgate.service 2>/dev/null |
          sed -n 's/.*Overall exposure level for floodgate.service: \([0-9.]*\).*/\1/p')"
[ -n "$score" ] || fail "systemd-analyze gave no score"
echo "   exposure $score (0 = fully sandboxed, 10 = none)"
awk -v s="$score" 'BEGIN { exit !(s <= 2.5) }' || fail "the unit's exposure is $score, above 2.5"

phase "installed into a fresh Debian 12 root"
tests/docker/base_image.sh
tarball="$(ls "$cache"/bookworm-minbase-*.tar | head -1)"
root="$(mktemp -d /var/tmp/fg-package.XXXXXX)"
cleanup() {
  umount -l "$root/proc" 2>/dev/null || true
  rm -rf "$root"
}
trap cleanup EXIT
tar -C "$root" -xf "$tarball"
mount -t proc proc "$root/proc"
cp /etc/resolv.conf "$root/etc/resolv.conf"
cp "$deb" "$root/tmp/floodgate.deb"
mkdir -p "$cache/apt"
export DEBIAN_FRONTEND=noninteractive
chroot "$root" apt-get update -qq
# dpkg -i leaves the dependencies missing; apt-get -f install brings them (as an operator does).
chroot "$root" dpkg -i /tmp/floodgate.deb >/dev/null 2>&1 || true
chroot "$root" apt-get -f install -y -qq --no-install-recommends >/dev/null || fail "apt-get -f install"
[ "$(chroot "$root" dpkg-query -W -f '${Status}' floodgate)" = "install ok installed" ] || fail "not installed"
chroot "$root" getent passwd floodgate >/dev/null || fail "no user floodgate"
chroot "$root" dpkg-query -W -f '${Conffiles}\n' floodgate | grep -q /etc/floodgate/floodgate.yaml || fail "no conffile"
[ -f "$root/lib/systemd/system/floodgate.service" ] || fail "no unit"
chroot "$root" /usr/bin/floodgate --check --config /etc/floodgate/floodgate.yaml || fail "the packaged config fails --check"
chroot "$root" man -w floodgate >/dev/null 2>&1 || [ -f "$root/usr/share/man/man1/floodgate.1.gz" ] || fail "no man page"

phase "the installed binary, as user floodgate, in its own network namespace"
unshare --net -- "$0" --run "$root"
echo "== package test: passed in $((SECONDS - t0))s"
