#!/usr/bin/env bash
# Kernel patch (issue 3), CPU only: fetch Debian's nvidia-open 550.163.01 source and bookworm's
# amd64 kernel headers (cached; the pinned 6.1 kernel, or the newest 6.1 one once Debian drops it:
# kmod-patch/fetch.sh), check that the series replays with git am and is up to date with
# kmod-patch/{src,include}, then build nvidia-uvm.ko the way DKMS would (dkms.conf's MAKE line,
# which runs build.sh: series applied, gasan files with -Werror, symbols checked), and once more
# to show build.sh accepts an already patched tree. Nothing is loaded.
set -euo pipefail
cd "$(dirname "$0")/../.."
eval "$(kmod-patch/fetch.sh | sed 's/^/export /')"
echo "kernel headers: linux-headers-$KVER-amd64 $KPKG"
before=$(git status --porcelain kmod-patch/patches)
kmod-patch/mkseries.sh
after=$(git status --porcelain kmod-patch/patches)
if [ "$before" != "$after" ] || ! git diff --quiet -- kmod-patch/patches; then
  git diff --stat -- kmod-patch/patches
  echo "kmod-patch/patches is stale: run kmod-patch/mkseries.sh and commit the result" >&2
  exit 1
fi
echo "series replays with git am and matches kmod-patch/{src,include}"

# A DKMS source directory: the module tree with kmod-patch/ as gasan/ and dkms.conf at its root.
dk=$(mktemp -d)
trap 'rm -rf "$dk"' EXIT
cp -a "$SRC/modules/nvidia-open-kernel/." "$dk/"
cp -a kmod-patch "$dk/gasan"
cp kmod-patch/dkms.conf "$dk/dkms.conf"
cd "$dk"
make_line=$(kernel_source_dir="$KDIR" parallel_jobs=2 bash -c '. ./dkms.conf; [ "${BUILT_MODULE_NAME[0]}" = nvidia-uvm ] && echo "${MAKE[0]}"')
echo "dkms MAKE[0]: $make_line"
eval "$make_line"
[ -f nvidia-uvm.ko ] || { echo "DKMS build left no nvidia-uvm.ko" >&2; exit 1; }
# The module carries gasan's ioctl entry points and the fault hook.
nm nvidia-uvm.ko > "$dk/symbols"
for sym in uvm_gasan_ioctl uvm_api_gasan_identify uvm_api_gasan_set_protection uvm_gasan_unregister_gpu uvm_gasan_record_fatal_fault gasan_validate_set_protection gasan_split_pages; do
  grep -q " $sym\$" "$dk/symbols" || { echo "nvidia-uvm.ko lacks $sym" >&2; exit 1; }
done
bash gasan/build.sh --src . --kdir "$KDIR" | tee "$dk/rebuild.log"
grep -q "already applied" "$dk/rebuild.log"
echo "kmod: nvidia-uvm.ko built with the gasan series ($(du -h nvidia-uvm.ko | cut -f1)); not loaded (CPU-only check)"
