#!/usr/bin/env bash
# deb-pin.sh SUITE COMPONENT PACKAGE VERSION
# Prints the scripts/debs.lock line for one Debian package, taken from a verified index: the suite's
# InRelease is checked with gpgv against Debian's archive keyring, the Packages.xz index against the
# SHA256 that InRelease signs, and the .deb (downloaded once) against the index. Use it to add or bump
# a pin (e.g. a new bookworm kernel point release), then commit the printed line in scripts/debs.lock.
# Env: DEBIAN_MIRROR (default http://deb.debian.org/debian), DEBIAN_KEYRING (default
# /usr/share/keyrings/debian-archive-keyring.gpg).
set -euo pipefail
[ $# -eq 4 ] || { echo "usage: deb-pin.sh SUITE COMPONENT PACKAGE VERSION" >&2; exit 2; }
suite=$1 comp=$2 pkg=$3 ver=$4
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
keyring=${DEBIAN_KEYRING:-/usr/share/keyrings/debian-archive-keyring.gpg}
[ -r "$keyring" ] || { echo "deb-pin.sh: no Debian archive keyring at $keyring (apt install debian-archive-keyring or set DEBIAN_KEYRING)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
curl -fsSL -o "$tmp/InRelease" "$mirror/dists/$suite/InRelease"
gpgv --keyring "$keyring" --output "$tmp/Release" "$tmp/InRelease" 2>/dev/null ||
  { echo "deb-pin.sh: $suite/InRelease is not signed by a key in $keyring" >&2; exit 1; }
want=$(awk -v f="$comp/binary-amd64/Packages.xz" '/^SHA256:/ {s=1; next} /^[^ ]/ {s=0} s && $3 == f {print $1}' "$tmp/Release")
[ -n "$want" ] || { echo "deb-pin.sh: $suite's Release lists no $comp/binary-amd64/Packages.xz" >&2; exit 1; }
curl -fsSL -o "$tmp/Packages.xz" "$mirror/dists/$suite/$comp/binary-amd64/Packages.xz"
echo "$want  $tmp/Packages.xz" | sha256sum -c --status || { echo "deb-pin.sh: Packages.xz does not match the signed Release" >&2; exit 1; }
xz -d "$tmp/Packages.xz"
stanza=$(awk -v p="$pkg" -v v="$ver" '
  $0 == "Package: " p {inp=1; s=""} inp {s = s $0 "\n"}
  inp && /^$/ {if (index(s, "\nVersion: " v "\n")) {printf "%s", s; exit} inp=0}' "$tmp/Packages")
file=$(sed -n 's/^Filename: //p' <<<"$stanza")
sum=$(sed -n 's/^SHA256: //p' <<<"$stanza")
[ -n "$file" ] || { echo "deb-pin.sh: $pkg $ver is not in $suite/$comp (today's index)" >&2; exit 1; }
curl -fsSL -o "$tmp/p.deb" "$mirror/$file"
echo "$sum  $tmp/p.deb" | sha256sum -c --status || { echo "deb-pin.sh: $file does not match the index" >&2; exit 1; }
sha1=$(sha1sum "$tmp/p.deb" | cut -d' ' -f1)
echo "$pkg $ver $sum $sha1 $file"
