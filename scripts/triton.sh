#!/usr/bin/env bash
# Installs the pinned Triton (scripts/triton-wheels.txt, pip --require-hashes) for this python3 into
# an ignored cache directory and prints the directory to put on PYTHONPATH. Idempotent: a second
# call only prints. Concurrent callers take turns on a lock.
# Env: GASAN_CACHE (default .cache): wheels go to $GASAN_CACHE/wheels, Triton to
# $GASAN_CACHE/triton-3.6.0-<python tag>.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
. "$here/scripts/lib/pinned-wheels.sh"
cache="${GASAN_CACHE:-$here/.cache}"
req="$here/scripts/triton-wheels.txt"
py=$(python3 -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
site="$cache/triton-3.6.0-$py"
stamp="$site/.installed-v1"
mkdir -p "$cache"
exec 9>"$cache/.triton.lock"
flock 9
if [ ! -f "$stamp" ]; then
  echo "gasan: installing pinned Triton 3.6.0 ($py) into $site" >&2
  rm -rf "$site"
  pinned_wheels_install "$req" "$site"
  PYTHONPATH="$site" python3 -c 'import triton' >&2
  touch "$stamp"
fi
echo "$site"
