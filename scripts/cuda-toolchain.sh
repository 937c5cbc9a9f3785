#!/usr/bin/env bash
# Installs the pinned CUDA 13.0 compiler toolchain from PyPI wheels into an ignored cache directory
# and prints the CUDA root (bin/nvcc, bin/ptxas, include/, lib/). Idempotent: a second call only prints.
# The wheels and their SHA-256 are pinned in scripts/cuda-wheels.txt (pip --require-hashes).
# Env: GASAN_CACHE (default .cache): wheels go to $GASAN_CACHE/wheels, the toolchain to
# $GASAN_CACHE/cuda-13.0.
# Usage: scripts/cuda-toolchain.sh [--print-root]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
. "$here/scripts/lib/pinned-wheels.sh"
cache="${GASAN_CACHE:-$here/.cache}"
root="$cache/cuda-13.0"
stamp="$root/.installed-v1"
req="$here/scripts/cuda-wheels.txt"
mkdir -p "$cache"
# Concurrent callers (cargo runs test binaries in parallel, each may install) take turns: the
# first installs, the others wait and find the stamp.
exec 9>"$cache/.cuda-toolchain.lock"
flock 9
if [ ! -f "$stamp" ]; then
  echo "gasan: installing pinned CUDA 13.0 toolchain into $root" >&2
  site="$cache/cuda-wheels-site"
  rm -rf "$site" "$root"
  pinned_wheels_install "$req" "$site"
  # The wheels spread one CUDA tree over nvidia/cu13/{bin,include,lib,nvvm}; merge into one root.
  src="$site/nvidia/cu13"
  [ -d "$src" ] || src=$(dirname "$(find "$site" -name nvcc -type f | head -1)")/..
  mkdir -p "$root"
  cp -a "$src"/. "$root"/
  chmod +x "$root"/bin/* "$root"/nvvm/bin/* 2>/dev/null || true
  # nvcc looks for libcudart_static and libcudadevrt under lib64 too.
  [ -e "$root/lib64" ] || ln -s lib "$root/lib64"
  "$root/bin/nvcc" --version >/dev/null
  rm -rf "$site"
  touch "$stamp"
fi
echo "$root"
