#!/usr/bin/env bash
# `cmake --install` into a DESTDIR lays out the tree a Debian system expects, the systemd unit
# passes `systemd-analyze verify`, the man pages render, libkrylov.so exports only the public API,
# and the Debian package (CPack) holds the same files and starts nothing when installed.
# Usage: test_install.sh BUILD_DIR
set -euo pipefail
build=$1
dest=$(mktemp -d)
trap 'rm -rf "$dest"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

DESTDIR=$dest cmake --install "$build" > "$dest.log" 2>&1 || { cat "$dest.log"; fail "cmake --install"; }
rm -f "$dest.log"
unitdir=$(pkg-config --variable=systemdsystemunitdir systemd 2>/dev/null || echo /lib/systemd/system)
libdir=$(find "$dest/usr/lib" -name 'libkrylov.so.0' -printf '%h\n' | head -1)
for f in usr/sbin/krylovd usr/bin/krylov usr/include/krylov.h "${unitdir#/}/krylovd.service" \
         "${unitdir#/}/krylovd.socket" usr/lib/sysusers.d/krylovd.conf usr/lib/tmpfiles.d/krylovd.conf \
         etc/krylovd/krylovd.conf usr/share/man/man8/krylovd.8 usr/share/man/man1/krylov.1 \
         usr/share/doc/krylovd/PROTOCOL.md; do
  [ -e "$dest/$f" ] || fail "missing /$f"
done
[ -n "$libdir" ] || fail "libkrylov.so.0 not installed"
[ -x "$dest/usr/sbin/krylovd" ] || fail "krylovd not executable"
"$dest/usr/sbin/krylovd" --version | grep -q '^krylovd ' || fail "installed krylovd --version"

# The unit names the installed paths and passes systemd-analyze verify without a word.
unit=$dest/${unitdir#/}/krylovd.service
grep -q '^ExecStart=/usr/sbin/krylovd --config /etc/krylovd/krylovd.conf --state-dir /var/lib/krylovd$' "$unit" \
  || fail "ExecStart: $(grep ExecStart "$unit")"
grep -q '^Type=notify$' "$unit" || fail "Type=notify"
grep -q '^User=krylovd$' "$unit" || fail "User="
# Compiled programs in a cache directory of their own, never the state directory (issue 32).
grep -q '^CacheDirectory=krylovd$' "$unit" || fail "CacheDirectory="
# The Unix socket beside TCP by default (issue 35): /run/krylovd made by the unit and tmpfiles,
# both sockets in the config and in the socket unit.
grep -q '^RuntimeDirectory=krylovd$' "$unit" || fail "RuntimeDirectory="
grep -q '^d /run/krylovd 0755 krylovd krylovd -$' "$dest/usr/lib/tmpfiles.d/krylovd.conf" \
  || fail "tmpfiles: /run/krylovd"
grep -q '^listen = 127.0.0.1:7373$' "$dest/etc/krylovd/krylovd.conf" || fail "conf: TCP listen"
grep -q '^listen = unix:/run/krylovd/krylovd.sock$' "$dest/etc/krylovd/krylovd.conf" \
  || fail "conf: unix listen"
grep -q '^ListenStream=127.0.0.1:7373$' "$dest/${unitdir#/}/krylovd.socket" || fail "socket: TCP"
grep -q '^ListenStream=/run/krylovd/krylovd.sock$' "$dest/${unitdir#/}/krylovd.socket" \
  || fail "socket: unix"
check=$dest/verify
mkdir -p "$check"
sed "s|/usr/sbin/krylovd|$dest/usr/sbin/krylovd|" "$unit" > "$check/krylovd.service"
cp "$dest/${unitdir#/}/krylovd.socket" "$check/"
out=$(systemd-analyze verify --man=no "$check/krylovd.socket" "$check/krylovd.service" 2>&1) \
  || fail "systemd-analyze verify: $out"
[ -z "$out" ] || fail "systemd-analyze verify printed: $out"
# The variant under mpirun (deploy/krylovd-mpi.service.in): the same paths, rank 0 as the main
# process (NotifyAccess=all, KillMode=mixed), and it verifies as cleanly.
munit=$dest/${unitdir#/}/krylovd-mpi.service
[ -e "$munit" ] || fail "missing krylovd-mpi.service"
grep -q '^ExecStart=/usr/bin/mpirun -np ${KD_RANKS} --bind-to none /usr/sbin/krylovd --config /etc/krylovd/krylovd.conf --state-dir /var/lib/krylovd$' "$munit" \
  || fail "krylovd-mpi ExecStart: $(grep ExecStart "$munit")"
grep -q '^KillMode=mixed$' "$munit" || fail "krylovd-mpi KillMode=mixed"
grep -q '^CacheDirectory=krylovd$' "$munit" || fail "krylovd-mpi CacheDirectory="
sed "s|/usr/sbin/krylovd|$dest/usr/sbin/krylovd|" "$munit" > "$check/krylovd-mpi.service"
if [ -x /usr/bin/mpirun ]; then
  out=$(systemd-analyze verify --man=no "$check/krylovd-mpi.service" 2>&1) \
    || fail "systemd-analyze verify krylovd-mpi: $out"
  [ -z "$out" ] || fail "systemd-analyze verify krylovd-mpi printed: $out"
fi
# A broken unit is noticed (the check can fail).
echo 'Bogus=1' >> "$check/krylovd.service"
out=$(systemd-analyze verify --man=no "$check/krylovd.service" 2>&1 || true)
[ -n "$out" ] || fail "systemd-analyze verify did not notice an unknown key"

# Man pages render.
for m in usr/share/man/man8/krylovd.8 usr/share/man/man1/krylov.1; do
  man -l "$dest/$m" > /dev/null 2>&1 || fail "man -l $m"
done

# libkrylov.so exports krylov_* and nothing else; the pkg-config file finds it.
syms=$(nm -D --defined-only "$libdir/libkrylov.so.0" | awk '{print $3}')
others=$(echo "$syms" | grep -v '^krylov_' || true)
[ -z "$others" ] || fail "libkrylov.so exports internal symbols: $others"
echo "$syms" | grep -qx 'krylov_solve' || fail "krylov_solve not exported"
libs=$(PKG_CONFIG_SYSROOT_DIR=$dest PKG_CONFIG_PATH=$libdir/pkgconfig pkg-config --libs krylov)
[[ "$libs" == *-lkrylov* ]] || fail "pkg-config krylov: $libs"

# The Debian package: same files; its scripts create the user and state dir and start nothing.
if command -v cpack > /dev/null && command -v dpkg-deb > /dev/null; then
  (cd "$dest" && cpack -G DEB --config "$build/CPackConfig.cmake" -B "$dest/pkg" > "$dest/cpack.log" 2>&1) \
    || { cat "$dest/cpack.log"; fail "cpack -G DEB"; }
  deb=$(ls "$dest"/pkg/*.deb | head -1)
  dpkg-deb -c "$deb" > "$dest/deb.list"
  grep -q './usr/sbin/krylovd$' "$dest/deb.list" || fail "deb lacks /usr/sbin/krylovd"
  grep -q 'krylovd.service$' "$dest/deb.list" || fail "deb lacks krylovd.service"
  mkdir -p "$dest/ctl" && dpkg-deb -e "$deb" "$dest/ctl"
  grep -q 'systemd-sysusers' "$dest/ctl/postinst" || fail "postinst does not create the user"
  if grep -hvE '^[[:space:]]*#' "$dest/ctl/"* | grep -E 'systemctl (start|enable|restart)|deb-systemd-invoke'; then
    fail "a maintainer script starts or enables something"
  fi
  grep -q '^/etc/krylovd/krylovd.conf$' "$dest/ctl/conffiles" || fail "krylovd.conf is not a conffile"
fi
echo "install tree, unit, man pages, library and package: ok"
