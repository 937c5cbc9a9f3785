#!/usr/bin/env bash
# deb-pin.sh SUITE COMPONENT PACKAGE VERSION [POLICY]
# Prints the scripts/debs.lock line for one Debian package, taken from Debian's signed index
# (scripts/debian_index.py: InRelease checked with gpgv against Debian's archive keyring, Packages.xz
# against the SHA-256 that InRelease signs) and the .deb, downloaded once, against the index.
# SUITE names the release (bookworm; bookworm-security and bookworm-updates are searched too).
# POLICY (default newest) says what scripts/deb-fetch.sh does once Debian drops this version:
# newest (the release's current version, from the signed index), kernel (the release's newest
# complete kernel of the same ABI series, image, headers and kbuild together) or exact (fail).
# Use it to add or bump a pin, then commit the printed line in scripts/debs.lock.
# Env: as scripts/debian_index.py (DEBIAN_MIRROR, DEBIAN_SECURITY_MIRROR, DEBIAN_KEYRING).
set -euo pipefail
[ $# -eq 4 ] || [ $# -eq 5 ] || { echo "usage: deb-pin.sh SUITE COMPONENT PACKAGE VERSION [newest|kernel|exact]" >&2; exit 2; }
suite=$1 comp=$2 pkg=$3 ver=$4 policy=${5:-newest}
case $policy in newest|kernel|exact) ;; *) echo "deb-pin.sh: unknown POLICY '$policy' (newest, kernel or exact)" >&2; exit 2 ;; esac
dist=${suite%-security}
dist=${dist%-updates}
top=$(cd "$(dirname "$0")/.." && pwd)
read -r _ _ sum archive file _ < <(python3 "$top/scripts/debian_index.py" exact "$dist" "$comp" "$pkg" "$ver") ||
  { echo "deb-pin.sh: $pkg $ver not found in $dist's signed indexes" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
curl -fsSL -o "$tmp/p.deb" "$archive/$file"
echo "$sum  $tmp/p.deb" | sha256sum -c --status || { echo "deb-pin.sh: $archive/$file does not match the index" >&2; exit 1; }
sha1=$(sha1sum "$tmp/p.deb" | cut -d' ' -f1)
echo "$pkg $ver $sum $sha1 $file $dist $policy"
