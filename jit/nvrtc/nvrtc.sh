#!/usr/bin/env bash
# Installs the pinned NVRTC and nvJitLink 13.0 (jit/nvrtc/wheels.txt, pip --require-hashes) into an ignored cache
# directory and prints the directory holding libnvrtc.so.13 and libnvJitLink.so.13 (headers in ../include).
# Idempotent: a second call only prints. Concurrent callers take turns on a lock.
# Env: GASAN_CACHE (default .cache): wheels go to $GASAN_CACHE/wheels, NVRTC to $GASAN_CACHE/nvrtc-13.0.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
. "$here/scripts/lib/pinned-wheels.sh"
cache="${GASAN_CACHE:-$here/.cache}"
req="$here/jit/nvrtc/wheels.txt"
root="$cache/nvrtc-13.0"
stamp="$root/.installed-v2"
mkdir -p "$cache"
exec 9>"$cache/.nvrtc.lock"
flock 9
if [ ! -f "$stamp" ]; then
  echo "gasan: installing pinned NVRTC and nvJitLink 13.0 into $root" >&2
  site="$cache/nvrtc-wheels-site"
  rm -rf "$site" "$root"
  pinned_wheels_install "$req" "$site"
  mkdir -p "$root"
  cp -a "$site/nvidia/cu13/." "$root/"
  rm -rf "$site"
  [ -f "$root/lib/libnvrtc.so.13" ] && [ -f "$root/lib/libnvJitLink.so.13" ]
  touch "$stamp"
fi
echo "$root/lib"
