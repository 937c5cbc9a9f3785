#!/usr/bin/env bash
# Makes libclang available to bindgen without root: unpacks Debian bookworm's libclang1-14 (and
# libllvm14 when the machine lacks it) under .cache/libclang and prints the directory to use as
# LIBCLANG_PATH (also add it to LD_LIBRARY_PATH). Packages are pinned in scripts/debs.lock
# (scripts/deb-fetch.sh: a pin Debian has dropped resolves from Debian's signed index).
# Env: GASAN_CACHE (default .cache).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
root="${GASAN_CACHE:-$top/.cache}/libclang"
"$top/scripts/deb-fetch.sh" libclang1-14 1:14.0.6-12 "$root" >&2
if ! ldconfig -p 2>/dev/null | grep -q 'libLLVM-14.so.1'; then
  "$top/scripts/deb-fetch.sh" libllvm14 1:14.0.6-12 "$root" >&2
fi
lib="$root/usr/lib/x86_64-linux-gnu"
[ -e "$lib/libclang.so" ] || ln -sf "$(basename "$(ls "$lib"/libclang-14.so* | head -1)")" "$lib/libclang.so"
echo "$lib"
