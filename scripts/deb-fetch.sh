#!/usr/bin/env bash
# deb-fetch.sh PACKAGE VERSION ROOT      (the older form SUITE COMPONENT PACKAGE VERSION ROOT works too)
# Downloads one Debian package pinned in scripts/debs.lock (cached under .cache/debs/, checked
# against the committed SHA-256) and unpacks it into ROOT without installing anything. Used for the
# kernel headers, NVIDIA's open module source and libclang (bindgen), so CI needs no root and no apt.
# Sources, in order: $DEBIAN_MIRROR/<pool path>, then snapshot.debian.org by the file's SHA1 (which
# keeps a pin working after Debian drops that version, e.g. at a bookworm point release).
# Env: DEBIAN_MIRROR (default http://deb.debian.org/debian), DEBIAN_SNAPSHOT (default
# https://snapshot.debian.org), GASAN_DEB_CACHE (default $GASAN_CACHE/debs, GASAN_CACHE defaulting to .cache).
set -euo pipefail
case $# in
  3) pkg=$1 ver=$2 root=$3 ;;
  5) pkg=$3 ver=$4 root=$5 ;;
  *) echo "usage: deb-fetch.sh PACKAGE VERSION ROOT" >&2; exit 2 ;;
esac
top=$(cd "$(dirname "$0")/.." && pwd)
lock="$top/scripts/debs.lock"
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
snapshot=${DEBIAN_SNAPSHOT:-https://snapshot.debian.org}
cache=${GASAN_DEB_CACHE:-${GASAN_CACHE:-$top/.cache}/debs}
read -r sum sha1 file < <(awk -v p="$pkg" -v v="$ver" '$1 == p && $2 == v {print $3, $4, $5}' "$lock") ||
  { echo "deb-fetch.sh: $pkg $ver is not pinned in scripts/debs.lock (add it with scripts/deb-pin.sh)" >&2; exit 1; }
mkdir -p "$cache" "$root"
deb="$cache/$(basename "$file")"
if ! echo "$sum  $deb" | sha256sum -c --status 2>/dev/null; then
  got=
  for url in "$mirror/$file" "$snapshot/file/$sha1"; do
    if curl -fsSL -o "$deb.tmp" "$url" && echo "$sum  $deb.tmp" | sha256sum -c --status; then
      got=$url; break
    fi
    echo "deb-fetch.sh: $pkg $ver: no matching file at $url" >&2
  done
  [ -n "$got" ] || { rm -f "$deb.tmp"; echo "deb-fetch.sh: cannot fetch $pkg $ver (SHA-256 $sum)" >&2; exit 1; }
  mv "$deb.tmp" "$deb"
fi
stamp="$root/.$(basename "$deb").unpacked"
[ -e "$stamp" ] || { dpkg-deb -x "$deb" "$root" && touch "$stamp"; }
