#!/usr/bin/env bash
# deb-fetch.sh SUITE COMPONENT PACKAGE VERSION ROOT
# Downloads one Debian package (verified against the archive index's SHA256, cached under
# .cache/debs/) and unpacks it into ROOT without installing anything. Used for the kernel headers,
# NVIDIA's open module source and libclang (bindgen), so CI needs no root and no apt.
set -euo pipefail
[ $# -eq 5 ] || { echo "usage: deb-fetch.sh SUITE COMPONENT PACKAGE VERSION ROOT" >&2; exit 2; }
suite=$1 comp=$2 pkg=$3 ver=$4 root=$5
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
cache=${GASAN_DEB_CACHE:-$(cd "$(dirname "$0")/.." && pwd)/.cache/debs}
mkdir -p "$cache" "$root"
idx="$cache/$suite-$comp.Packages"
if [ ! -s "$idx" ]; then
  curl -fsSL "$mirror/dists/$suite/$comp/binary-amd64/Packages.xz" | xz -d > "$idx.tmp" ||
    { echo "deb-fetch.sh: cannot read the $suite/$comp index from $mirror" >&2; exit 1; }
  mv "$idx.tmp" "$idx"
fi
stanza=$(awk -v p="$pkg" -v v="$ver" '
  $0 == "Package: " p {inp=1; s=""} inp {s = s $0 "\n"}
  inp && /^$/ {if (s ~ "\nVersion: " v "\n") {printf "%s", s; exit} inp=0}' "$idx")
file=$(sed -n 's/^Filename: //p' <<<"$stanza")
sum=$(sed -n 's/^SHA256: //p' <<<"$stanza")
[ -n "$file" ] || { echo "deb-fetch.sh: $pkg $ver is not in $suite/$comp" >&2; exit 1; }
deb="$cache/$(basename "$file")"
if ! echo "$sum  $deb" | sha256sum -c --status 2>/dev/null; then
  curl -fsSL -o "$deb.tmp" "$mirror/$file"
  echo "$sum  $deb.tmp" | sha256sum -c --status || { echo "deb-fetch.sh: checksum mismatch for $file" >&2; exit 1; }
  mv "$deb.tmp" "$deb"
fi
stamp="$root/.$(basename "$deb").unpacked"
[ -e "$stamp" ] || { dpkg-deb -x "$deb" "$root" && touch "$stamp"; }
