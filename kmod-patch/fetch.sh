#!/usr/bin/env bash
# Downloads (once, verified) and unpacks what the kernel-patch build needs: NVIDIA's open kernel
# module source as Debian trixie ships it, and bookworm's amd64 kernel headers with their kbuild
# tools. Nothing is installed system-wide; everything lands under .cache/kmod/ (ignored).
# Prints two lines: SRC=<unpacked nvidia-open tree> KDIR=<kernel build dir>.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
cache=${GASAN_KMOD_CACHE:-$top/.cache/kmod}
root="$cache/root"
KVER=6.1.0-50 KPKG=6.1.176-1
"$top/scripts/deb-fetch.sh" trixie contrib nvidia-open-kernel-source 550.163.01-2 "$root" >&2
for p in "linux-headers-$KVER-amd64" "linux-headers-$KVER-common" linux-kbuild-6.1; do
  "$top/scripts/deb-fetch.sh" bookworm main "$p" "$KPKG" "$root" >&2
done
# The header packages refer to each other by absolute /usr/... paths; point them into root/.
kdir="$root/usr/src/linux-headers-$KVER-amd64"
# (Idempotent: runs every time, so a re-unpacked package is fixed again.)
find "$root/usr/src" "$root/usr/lib/linux-kbuild-6.1" -type l | while read -r l; do
  t=$(readlink "$l")
  case "$t" in /usr/*) ln -sfn "$root$t" "$l" ;; esac
done
{ grep -rl --include=Makefile '^include /usr/src/' "$kdir" || true; } | while read -r f; do
  sed -i "s#^include /usr/src/#include $root/usr/src/#" "$f"
done
src="$cache/src/nvidia-open-550.163.01"
if [ ! -d "$src" ]; then
  rm -rf "$src.tmp" && mkdir -p "$src.tmp"
  tar -xJf "$root/usr/src/nvidia-open-kernel.tar.xz" -C "$src.tmp"
  mv "$src.tmp" "$src"
fi
echo "SRC=$src"
echo "KDIR=$kdir"
