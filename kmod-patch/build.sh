#!/usr/bin/env bash
# Applies gasan's nvidia-uvm patch series to an unpacked NVIDIA open kernel module tree and builds
# nvidia-uvm.ko. The driver branch (550, 580, 595: branches.sh) is detected from the tree's version
# (Kbuild's NV_VERSION_STRING, or version.mk); a branch without a series is refused by name.
#
#   kmod-patch/build.sh --src DIR [--kdir DIR] [--jobs N] [--nvidia-symvers FILE]
#   kmod-patch/build.sh --src DIR --detect       (prints the branch and version; builds nothing)
#
# --src   the tree with Kbuild and nvidia-uvm/ (Debian: /usr/src/nvidia-open-kernel.tar.xz unpacked,
#         modules/nvidia-open-kernel; GitHub: the repository, or its kernel-open/), or a directory
#         holding that tree. Patched in place; a tree that already carries the series is built as
#         it is.
# --kdir  kernel build directory (default /lib/modules/$(uname -r)/build). Debian's split header
#         packages (-amd64 including -common) are followed automatically.
# --nvidia-symvers  nvidia.ko's Module.symvers; without it nvidia.ko is built from the same tree
#         alongside, so nvidia-uvm's imports get symbol versions (CRCs) either way.
# Exits non-zero on any failure: a series that does not apply, a compiler warning in gasan's files
# (they build with -Werror), or an unresolved symbol the kernel does not export.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src="" kdir="/lib/modules/$(uname -r)/build" jobs=$(nproc 2>/dev/null || echo 2) symvers=""
detect=0
. "$here/branches.sh"
usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-2}"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --src) src=${2:?--src needs a directory}; shift 2 ;;
    --kdir) kdir=${2:?--kdir needs a directory}; shift 2 ;;
    --jobs) jobs=${2:?--jobs needs a number}; shift 2 ;;
    --nvidia-symvers) symvers=${2:?--nvidia-symvers needs a file}; shift 2 ;;
    --detect) detect=1; shift ;;
    -h|--help) usage 0 ;;
    *) echo "build.sh: unknown option '$1'" >&2; usage 2 ;;
  esac
done
[ -n "$src" ] || { echo "build.sh: --src DIR is required" >&2; usage 2; }
[ -d "$src" ] || { echo "build.sh: --src '$src' is not a directory" >&2; exit 2; }
for cand in "$src" "$src/modules/nvidia-open-kernel" "$src/kernel-open"; do
  if [ -f "$cand/Kbuild" ] && [ -d "$cand/nvidia-uvm" ]; then tree=$(cd "$cand" && pwd); break; fi
done
[ -n "${tree:-}" ] || { echo "build.sh: no Kbuild + nvidia-uvm/ under '$src'" >&2; exit 2; }
branch=$(gasan_branch_of_tree "$tree") || exit 3
version=$(gasan_tree_version "$tree")
tested=$(gasan_branch_tested "$branch")
series="$here/$(gasan_branch_series "$branch")"
if [ "$detect" = 1 ]; then echo "branch=$branch version=$version tested=$tested series=$series"; exit 0; fi
echo "build.sh: driver $version, branch $branch (series $(basename "$series"), tested with $tested)"
[ "$version" = "$tested" ] || echo "build.sh: note: $version is not the tested $tested; the series may need a refresh (mkseries.sh)" >&2
[ -f "$kdir/Makefile" ] || { echo "build.sh: --kdir '$kdir' has no kernel Makefile (install the kernel headers)" >&2; exit 2; }
kdir=$(cd "$kdir" && pwd)
# Debian's linux-headers-<ver>-amd64 Makefile includes the -common tree, which holds the sources.
ksrc=$(sed -n 's#^include \(/.*\)/Makefile$#\1#p' "$kdir/Makefile" | head -1)
[ -n "$ksrc" ] && [ -d "$ksrc" ] || ksrc=$kdir

# Apply the series (idempotent: a patch already present is recognised by its reverse applying).
# GNU patch rather than git apply: the tree may sit inside some other git work tree.
while read -r p; do
  [ -n "$p" ] || continue
  if (cd "$tree" && patch -p1 -R --dry-run -s -f <"$series/$p" >/dev/null 2>&1); then
    echo "build.sh: $p already applied"
  else
    (cd "$tree" && patch -p1 -s -f --no-backup-if-mismatch <"$series/$p") ||
      { echo "build.sh: $p does not apply to $tree" >&2; exit 1; }
    echo "build.sh: applied $p"
  fi
done < "$series/series"

# The series carries copies of gasan's shared files; they must be the ones uvm-shim tests.
for f in include/uvm_gasan_ioctl.h include/gasan_map_math.h src/gasan_map_math.c src/uvm_gasan.c src/uvm_gasan.h "src/glue/$branch.h:uvm_gasan_glue.h"; do
  dst=${f#*:} && f=${f%%:*} && [ "$dst" != "$f" ] || dst=$(basename "$f")
  cmp -s "$here/$f" "$tree/nvidia-uvm/$dst" ||
    { echo "build.sh: nvidia-uvm/$dst differs from kmod-patch/$f: regenerate the series (kmod-patch/mkseries.sh --branch $branch)" >&2; exit 1; }
done

# nvidia-uvm imports nvidia.ko's nvUvmInterface* symbols. A kernel with CONFIG_MODVERSIONS (Debian's)
# refuses an import without a CRC ("no symbol version"), so modpost must see nvidia.ko's exports:
# from --nvidia-symvers, else by building nvidia.ko from the same tree in the same make (same
# source version, same CRCs as the installed nvidia.ko of that version; only nvidia-uvm.ko is used).
if [ -n "$symvers" ]; then
  modules=nvidia-uvm
  extra=(KBUILD_EXTRA_SYMBOLS="$(cd "$(dirname "$symvers")" && pwd)/$(basename "$symvers")")
else
  modules="nvidia nvidia-uvm"
  extra=()
fi
log=$(mktemp)
versions=$(mktemp)
trap 'rm -f "$log" "$versions"' EXIT
echo "build.sh: building nvidia-uvm.ko in $tree against $kdir"
if ! make -C "$kdir" M="$tree" NV_KERNEL_SOURCES="$ksrc" NV_KERNEL_OUTPUT="$kdir" NV_KERNEL_MODULES="$modules" \
     ${extra[@]+"${extra[@]}"} -j"$jobs" modules >"$log" 2>&1; then
  grep -E 'error|Error' "$log" | grep -v 'CFLAGS=' | head -40 >&2
  echo "build.sh: the build failed (full log above was $(wc -l <"$log") lines)" >&2
  exit 1
fi
if grep -E 'nvidia-uvm/(uvm_gasan[a-z_]*|gasan_map_math)\.[ch].*warning:' "$log" >&2; then
  echo "build.sh: warnings in gasan's files" >&2
  exit 1
fi
ko="$tree/nvidia-uvm.ko"
[ -f "$ko" ] || { echo "build.sh: $ko was not produced" >&2; exit 1; }

# Every symbol left undefined must come from the kernel or from nvidia.ko.
if [ -f "$kdir/Module.symvers" ] && command -v nm >/dev/null; then
  missing=$(comm -23 <(nm -u "$ko" | awk '{print $2}' | sort -u) <(awk '{print $2}' "$kdir/Module.symvers" | sort -u) |
            grep -v -E '^(nvUvmInterface|nv_|nvidia_)' || true)
  if [ -n "$missing" ]; then
    echo "build.sh: symbols neither the kernel nor nvidia.ko export:" >&2
    echo "$missing" >&2
    exit 1
  fi
fi
# With modversions, every nvidia.ko import must carry a CRC (else the kernel refuses to load it).
if grep -q '^CONFIG_MODVERSIONS=y' "$kdir/include/config/auto.conf" 2>/dev/null && command -v objcopy >/dev/null; then
  imports=$(nm -u "$ko" | awk '{print $2}' | grep -c '^nvUvmInterface' || true)
  # Into a file: objcopy seeks in its output, and written to a pipe the section comes out empty
  # (binutils 2.40), which read as "no import versioned".
  objcopy -O binary --only-section=__versions "$ko" "$versions" 2>/dev/null || : >"$versions"
  versioned=$(strings "$versions" | grep -c '^nvUvmInterface' || true)
  if [ "$imports" != "$versioned" ]; then
    echo "build.sh: $versioned of $imports nvUvmInterface* imports carry a symbol version: the module would not load" >&2
    exit 1
  fi
  echo "build.sh: all $imports nvUvmInterface* imports carry symbol versions (CONFIG_MODVERSIONS)"
fi
vermagic=$(strings "$ko" | sed -n 's/^vermagic=//p' | head -1)
echo "build.sh: built $ko ($(du -h "$ko" | cut -f1), vermagic $vermagic)"
