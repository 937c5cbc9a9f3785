#!/usr/bin/env bash
# Regenerates a branch's series after editing gasan's files in kmod-patch/{src,include}: replays
# the series with git am on a pristine tree, refreshes the copies of those files (and the branch's
# glue header, src/glue/<branch>.h, as nvidia-uvm/uvm_gasan_glue.h) in the last patch, and writes
# the series again with git format-patch. Edit hooks in upstream files the same way: replay, change
# the work tree (.cache/kmod/series-work[-<branch>]), amend the right commit, run this with --keep.
#
#   kmod-patch/mkseries.sh [--branch 550|580|595] [--src DIR] [--keep]
#
# 550 (the default) takes Debian's tree from fetch.sh. The other branches need --src: NVIDIA's
# open-gpu-kernel-modules at the tested tag (branches.sh), unpacked (the repository or its
# kernel-open/); its version must be the tested one. Nothing of NVIDIA's is written outside the cache.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/branches.sh"
branch=550 src="" keep=0
while [ $# -gt 0 ]; do
  case "$1" in
    --branch) branch=${2:?--branch needs a number}; shift 2 ;;
    --src) src=${2:?--src needs a directory}; shift 2 ;;
    --keep) keep=1; shift ;;
    *) echo "mkseries.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
tested=$(gasan_branch_tested "$branch") || { echo "mkseries.sh: no branch '$branch' (supported: $gasan_branches)" >&2; exit 2; }
series="$here/$(gasan_branch_series "$branch")"
cache=${GASAN_KMOD_CACHE:-${GASAN_CACHE:-$(cd "$here/.." && pwd)/.cache}/kmod}
if [ "$branch" = 550 ]; then
  work="$cache/series-work"
  if [ -z "$src" ]; then
    eval "$("$here/fetch.sh" | sed 's/^/export /')"
    src="$SRC/modules/nvidia-open-kernel"
  fi
else
  work="$cache/series-work-$branch"
fi
if [ "$keep" = 0 ]; then
  [ -n "$src" ] || { echo "mkseries.sh: --branch $branch needs --src (NVIDIA/open-gpu-kernel-modules at tag $tested)" >&2; exit 2; }
  [ -d "$src/kernel-open" ] && src="$src/kernel-open"
  [ -f "$src/Kbuild" ] || { echo "mkseries.sh: no Kbuild in '$src'" >&2; exit 2; }
  v=$(gasan_tree_version "$src") || true
  [ "$v" = "$tested" ] || { echo "mkseries.sh: '$src' is ${v:-of unknown version}, branch $branch's series is made against $tested" >&2; exit 1; }
fi
git_() { git -c user.name=gasan -c user.email=gasan@localhost -c core.autocrlf=false "$@"; }
if [ "$keep" = 0 ]; then
  rm -rf "$work"
  mkdir -p "$work"
  cp -a "$src/." "$work/"
  (cd "$work" && git_ init -q && git_ add -A && git_ commit -qm "nvidia-open $tested ($(gasan_branch_source "$branch"))")
  (cd "$work" && git_ am -q "$series"/0*.patch)
fi
cd "$work"
for f in include/uvm_gasan_ioctl.h include/gasan_map_math.h src/gasan_map_math.c src/uvm_gasan.c src/uvm_gasan.h; do
  cp "$here/$f" "nvidia-uvm/$(basename "$f")"
done
cp "$here/src/glue/$branch.h" nvidia-uvm/uvm_gasan_glue.h
git_ add nvidia-uvm
git_ diff --cached --quiet || git_ commit -q --amend --no-edit
n=$(git rev-list --count HEAD) && n=$((n - 1))
mkdir -p "$series"
rm -f "$series"/*.patch
git_ format-patch -q --no-signature --zero-commit -o "$series" "HEAD~$n..HEAD"
(cd "$series" && ls ./*.patch | sed 's#^\./##' > series)
echo "mkseries.sh: branch $branch: $(wc -l < "$series/series") patches in $series"
