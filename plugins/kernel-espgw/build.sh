#!/usr/bin/env bash
# Builds libstrongswan-kernel-espgw.so for the strongSwan installed here.
#
#   plugins/kernel-espgw/build.sh [OUTDIR]        (default: plugins/kernel-espgw/build)
#
# Debian ships no strongSwan headers, so they come from Debian's own source of the
# installed version (the upstream tarball `apt-get source` fetches), configured once for
# config.h, cached under $ESPGW_STRONGSWAN_SRC (default /var/cache/espgw). A source whose
# upstream version differs from the installed library's is refused: the plugin must be
# built against the headers of the charon that loads it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/build}
cache=${ESPGW_STRONGSWAN_SRC:-/var/cache/espgw}

installed=$(dpkg-query -W -f='${Version}' libstrongswan 2>/dev/null || true)
if [ -z "$installed" ]; then
  echo "kernel-espgw: strongSwan is not installed (apt-get install strongswan-charon)" >&2
  exit 1
fi
upstream=${installed%%-*}
src="$cache/strongswan-$upstream"

fetch() {
  # A private source list: the system's own apt state is left alone.
  local apt="$cache/apt"
  mkdir -p "$apt/lists/partial" "$apt/etc" "$apt/cache/archives/partial"
  cat > "$apt/etc/src.sources" <<SOURCES
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb-src
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
  local opts=(-o Dir::Etc::sourcelist=/dev/null -o Dir::Etc::sourceparts="$apt/etc"
              -o Dir::State::Lists="$apt/lists" -o Dir::Cache="$apt/cache"
              -o APT::Sandbox::User=root)
  apt-get "${opts[@]}" update -qq
  # The upstream tarball is what matters (Debian's revisions patch .c files, not the
  # interfaces a plugin sees). The mirror may lack the installed revision's Debian files
  # (a security update) while it has the tarball: apt then fails after fetching it.
  local tarball="$cache/strongswan_$upstream.orig.tar.bz2"
  (cd "$cache" && apt-get "${opts[@]}" source --download-only -qq "strongswan=$installed") \
    >/dev/null 2>&1 || true
  if [ ! -f "$tarball" ]; then
    (cd "$cache" && apt-get "${opts[@]}" source --download-only -qq strongswan) >/dev/null 2>&1 || true
  fi
  if [ ! -f "$tarball" ]; then
    echo "kernel-espgw: Debian's source of strongSwan $upstream is not available" \
         "(found: $(ls "$cache"/strongswan_*.orig.tar.* 2>/dev/null | xargs -n1 basename | tr '\n' ' '))" >&2
    exit 1
  fi
  tar -C "$cache" -xjf "$tarball"
}

if [ ! -f "$src/config.h" ]; then
  mkdir -p "$cache"
  [ -d "$src" ] || fetch
  got=$(sed -n 's/^PACKAGE_VERSION=.\([0-9.]*\).*/\1/p' "$src/configure" | head -1)
  if [ "$got" != "$upstream" ]; then
    echo "kernel-espgw: source is strongSwan $got, the installed library is $upstream" >&2
    exit 1
  fi
  echo "kernel-espgw: configuring strongSwan $upstream's source for config.h"
  (cd "$src" && ./configure -q --disable-defaults --disable-gmp >/dev/null)
fi

mkdir -p "$out"
cc ${CFLAGS:--O2 -g} -Wall -Werror -Wno-unused-parameter -fPIC -shared \
  -include "$src/config.h" \
  -I"$src/src/libstrongswan" -I"$src/src/libcharon" \
  "$here"/kernel_espgw_plugin.c "$here"/kernel_espgw_ipsec.c \
  -L/usr/lib/ipsec -Wl,-rpath,/usr/lib/ipsec -l:libcharon.so.0 -l:libstrongswan.so.0 -lpthread \
  -o "$out/libstrongswan-kernel-espgw.so"
echo "kernel-espgw: built $out/libstrongswan-kernel-espgw.so for strongSwan $installed"
