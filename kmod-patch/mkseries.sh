#!/usr/bin/env bash
# Regenerates patches/ after editing gasan's files in kmod-patch/{src,include}: replays the series
# with git am on a pristine tree, refreshes the copies of those files in the last patch, and writes
# the series again with git format-patch. Edit hooks in upstream files the same way: replay, change
# the work tree (.cache/kmod/series-work), amend the right commit, run this with --keep.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
eval "$("$here/fetch.sh" | sed 's/^/export /')"
work=${GASAN_KMOD_CACHE:-${GASAN_CACHE:-$(cd "$here/.." && pwd)/.cache}/kmod}/series-work
git_() { git -c user.name=gasan -c user.email=gasan@localhost -c core.autocrlf=false "$@"; }
if [ "${1:-}" != "--keep" ]; then
  rm -rf "$work"
  mkdir -p "$work"
  cp -a "$SRC/modules/nvidia-open-kernel/." "$work/"
  (cd "$work" && git_ init -q && git_ add -A && git_ commit -qm "nvidia-open 550.163.01 (Debian nvidia-open-kernel-source 550.163.01-2)")
  (cd "$work" && git_ am -q "$here"/patches/0*.patch)
fi
cd "$work"
for f in include/uvm_gasan_ioctl.h include/gasan_map_math.h src/gasan_map_math.c src/uvm_gasan.c src/uvm_gasan.h; do
  cp "$here/$f" "nvidia-uvm/$(basename "$f")"
done
git_ add nvidia-uvm
git_ diff --cached --quiet || git_ commit -q --amend --no-edit
n=$(git rev-list --count HEAD) && n=$((n - 1))
rm -f "$here"/patches/*.patch
git_ format-patch -q --no-signature --zero-commit -o "$here/patches" "HEAD~$n..HEAD"
(cd "$here/patches" && ls ./*.patch | sed 's#^\./##' > series)
echo "mkseries.sh: $(wc -l < "$here/patches/series") patches in $here/patches"
