#!/usr/bin/env bash
# Downloads (once, verified) and unpacks what the kernel-patch build needs: NVIDIA's open kernel
# module source as Debian trixie ships it, and bookworm's amd64 kernel headers with their kbuild
# tools. Nothing is installed system-wide; everything lands under .cache/kmod/ (ignored).
# The packages (and their SHA-256) are pinned in scripts/debs.lock. The kernel is the pinned one
# while Debian has it; once a bookworm point release drops it, `scripts/deb-fetch.sh --kernel`
# resolves the newest 6.1.0-* kernel from Debian's signed index, image, headers and kbuild at one
# version (printed, and kept in the cache's resolved-versions), and the build and the VM follow it.
# The series itself (6.1, bookworm's) changes only by hand: pin the new kernel's packages with
# scripts/deb-pin.sh DIST main PACKAGE VERSION kernel, replace the kernel lines of debs.lock, and
# check that the series still builds and loads (scripts/test.d/40-kmod.sh, 45-kmod-vm.sh).
# The NVIDIA source is pinned exactly: the patch series targets that source.
# Env: GASAN_KMOD_CACHE (default $GASAN_CACHE/kmod, GASAN_CACHE defaulting to .cache).
# Prints four lines: SRC=<unpacked nvidia-open tree> KDIR=<kernel build dir> KVER=<ABI, e.g.
# 6.1.0-50> KPKG=<package version, e.g. 6.1.176-1>.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
cache=${GASAN_KMOD_CACHE:-${GASAN_CACHE:-$top/.cache}/kmod}
root="$cache/root"
read -r KVER KPKG < <("$top/scripts/deb-fetch.sh" --kernel) || { echo "fetch.sh: no kernel (scripts/deb-fetch.sh --kernel)" >&2; exit 1; }
"$top/scripts/deb-fetch.sh" nvidia-open-kernel-source 550.163.01-2 "$root" >&2
for p in "linux-headers-$KVER-amd64" "linux-headers-$KVER-common" linux-kbuild-6.1; do
  "$top/scripts/deb-fetch.sh" "$p" "$KPKG" "$root" >&2
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
echo "KVER=$KVER"
echo "KPKG=$KPKG"
