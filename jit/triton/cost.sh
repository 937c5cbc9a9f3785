#!/usr/bin/env bash
# What checks cost ptxas on Triton's kernels (jit/FORMS.md, "Cost seen"), no GPU needed: the
# pinned Triton (scripts/triton-wheels.txt) compiles jit/triton/kernels.py for sm_90a, each
# kernel's PTX is checked by `gasan-ptx instrument` with its default options (gasan-ptxas's), and
# the pinned ptxas reports registers and spill-store bytes of the native and the checked entry with
# Triton's own flags (-lineinfo -v --gpu-name=sm_90a). Prints one Markdown row per kernel.
# Run from the repository root: bash jit/triton/cost.sh
set -euo pipefail
cuda=${GASAN_CUDA_ROOT:-$(scripts/cuda-toolchain.sh)}
site=$(scripts/triton.sh)
cargo build --release --locked -p gasan-instrument --bin gasan-ptx 2>&1 | tail -1 >&2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
PYTHONPATH="$site" TRITON_CACHE_DIR="$tmp/triton-cache" TRITON_HOME="$tmp/triton-home" TRITON_PTXAS_PATH="$cuda/bin/ptxas" \
  python3 jit/triton/kernels.py "$tmp/native" >/dev/null
# "registers / spill-store bytes" of entry $2 in $1.
cost() {
  "$cuda/bin/ptxas" -lineinfo -v --gpu-name=sm_90a "$1" -o /dev/null 2>&1 | awk -v k="$2" '
    index($0, "Compiling entry function '"'"'" k "'"'"'") { on = 1 }
    on && /spill stores/ { s = $5 }
    on && /Used [0-9]+ registers/ { for (i = 1; i <= NF; i++) if ($(i + 1) == "registers,") r = $i; on = 0 }
    END { printf "%s / %s", r, s }'
}
echo "| kernel | native | checked |"
echo "|---|---|---|"
for ptx in "$tmp"/native/*.ptx; do
  name=$(basename "$ptx" .ptx)
  entry=$(grep -m1 -o '\.entry [A-Za-z_0-9]*' "$ptx" | cut -d' ' -f2)
  target/release/gasan-ptx instrument -o "$tmp/$name.checked.ptx" "$ptx" >/dev/null 2>&1
  echo "| $name | $(cost "$ptx" "$entry") | $(cost "$tmp/$name.checked.ptx" "$entry") |"
done
