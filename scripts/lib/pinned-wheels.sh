# Sourced by the scripts that install pinned wheels (cuda-toolchain.sh, triton.sh, jit/nvrtc/nvrtc.sh).
# pinned_wheels_install REQUIREMENTS TARGET: downloads the wheels REQUIREMENTS pins by hash into
# $cache/wheels (kept: a second install reads them from there) and installs exactly those files into
# TARGET (pip checks the hashes again, and compiles nothing). Progress goes to stderr, so the calling
# script's stdout stays the one path it prints. The caller holds its lock and sets `cache`.
pinned_wheels_install() {
  local req=$1 target=$2
  mkdir -p "$cache/wheels"
  python3 -m pip download -q --no-deps --only-binary=:all: --require-hashes -d "$cache/wheels" -r "$req" >&2
  python3 -m pip install -q --no-deps --no-index --find-links "$cache/wheels" --only-binary=:all: \
    --no-compile --require-hashes --target "$target" -r "$req" >&2
}
