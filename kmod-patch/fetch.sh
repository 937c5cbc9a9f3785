#!/usr/bin/env bash
# Download (once, verified by the archive's SHA256) and unpack what the kernel-patch build needs:
# NVIDIA's open kernel module source as Debian trixie ships it, and bookworm's amd64 kernel headers
# with their kbuild tools. Nothing is installed system-wide; everything lands under
# .cache/kmod/ (ignored) and is reused by later runs.
# Prints two lines: SRC=<unpacked nvidia-open tree> KDIR=<kernel build dir>.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${GASAN_KMOD_CACHE:-$(cd "$here/.." && pwd)/.cache/kmod}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
mkdir -p "$cache/debs" "$cache/root"
cd "$cache"

index() { # suite component -> Packages file
  local f="$1-$2.Packages"
  [ -s "$f" ] || curl -fsSL "$mirror/dists/$1/$2/binary-amd64/Packages.xz" | xz -d > "$f.tmp" && mv "$f.tmp" "$f" 2>/dev/null || true
  [ -s "$f" ] || { echo "fetch.sh: cannot read the $1/$2 package index from $mirror" >&2; exit 1; }
  echo "$f"
}

fetch() { # Packages-file package version -> unpacked into root/
  local idx=$1 pkg=$2 ver=$3 stanza file sum deb
  stanza=$(awk -v p="$pkg" -v v="$ver" '
    $0 == "Package: " p {inp=1; s=""} inp {s = s $0 "\n"}
    inp && /^$/ {if (s ~ "\nVersion: " v "\n") {printf "%s", s; exit} inp=0}' "$idx")
  file=$(sed -n 's/^Filename: //p' <<<"$stanza")
  sum=$(sed -n 's/^SHA256: //p' <<<"$stanza")
  [ -n "$file" ] || { echo "fetch.sh: $pkg $ver is not in $idx" >&2; exit 1; }
  deb="debs/$(basename "$file")"
  if ! echo "$sum  $deb" | sha256sum -c --status 2>/dev/null; then
    curl -fsSL -o "$deb.tmp" "$mirror/$file"
    echo "$sum  $deb.tmp" | sha256sum -c --status || { echo "fetch.sh: checksum mismatch for $file" >&2; exit 1; }
    mv "$deb.tmp" "$deb"
  fi
  if [ ! -e "root/.$pkg.unpacked" ]; then
    dpkg-deb -x "$deb" root
    touch "root/.$pkg.unpacked"
  fi
}

NV_VERSION=550.163.01-2
KVER=6.1.0-50
KPKG=6.1.176-1
trixie=$(index trixie contrib)
bookworm=$(index bookworm main)
fetch "$trixie" nvidia-open-kernel-source "$NV_VERSION"
fetch "$bookworm" "linux-headers-$KVER-amd64" "$KPKG"
fetch "$bookworm" "linux-headers-$KVER-common" "$KPKG"
fetch "$bookworm" linux-kbuild-6.1 "$KPKG"

# The header packages refer to each other by absolute /usr/... paths; point them into root/.
kdir="$cache/root/usr/src/linux-headers-$KVER-amd64"
if [ ! -e "$cache/root/.paths-fixed" ]; then
  find "$cache/root/usr/src" "$cache/root/usr/lib/linux-kbuild-6.1" -type l | while read -r l; do
    t=$(readlink "$l")
    case "$t" in /usr/*) ln -sfn "$cache/root$t" "$l" ;; esac
  done
  grep -rl --include=Makefile '/usr/src/linux-headers-' "$kdir" | while read -r f; do
    sed -i "s#/usr/src/linux-headers-#$cache/root/usr/src/linux-headers-#g" "$f"
  done
  touch "$cache/root/.paths-fixed"
fi

src="$cache/src/nvidia-open-550.163.01"
if [ ! -d "$src" ]; then
  mkdir -p "$src.tmp"
  tar -xJf "$cache/root/usr/src/nvidia-open-kernel.tar.xz" -C "$src.tmp"
  mv "$src.tmp" "$src"
fi
echo "SRC=$src"
echo "KDIR=$kdir"
