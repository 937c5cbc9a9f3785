#!/usr/bin/env bash
# Triton kernels checked at compile time, without a GPU (issue 39): the pinned Triton
# (scripts/triton-wheels.txt) compiles jit/triton/kernels.py ahead of time for sm_90a
# (vector add, softmax, layernorm, f16/bf16 tl.dot matmuls with and without Triton's alignment
# hints, an attention forward, an atomic histogram, a TMA matmul), once with the pinned CUDA
# ptxas as Triton's ptxas (native) and once through gasan-ptxas with that ptxas as the real one,
# both in ONE Triton cache. Asserts:
# - Triton takes gasan-ptxas's --version answer (its path stays TRITON_PTXAS_PATH, the CUDA
#   release is the real one's) and the answer differs from the native one;
# - every checked cubin carries the marker and its site table, one global site per check that
#   `gasan-ptx stats` counts, sites on the kernel's Python lines; native cubins carry neither;
# - every guarded global access in the checked PTX is checked under its own guard (a masked-off
#   lane is never reported);
# - ptxas serializes no checked kernel's wgmma (C7518) where it does not serialize the native one's;
# - a native run after the checked one gets the same native cubins as before (the shared Triton
#   cache never hands a checked cubin to a native run, nor the reverse);
# - under gasan-run, with no real ptxas named, Triton's bundled ptxas runs behind the front end,
#   and its bundled ptxas-blackwell behind the front end's other name (sm_100a), which checks
#   every kernel of kernels.py compiled for sm_100a (tcgen05 matmuls, TMA) into a marked cubin.
# Prints the census of Triton's access forms and what the rewriter does with them (jit/FORMS.md).
set -euo pipefail
py=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
case $py in
  3.1[0-4]) ;;
  *) echo "SKIPPED: Triton kernels: no pinned Triton 3.6.0 wheel for Python $py (scripts/triton-wheels.txt has 3.10-3.14)"; exit 0 ;;
esac
cuda=${GASAN_CUDA_ROOT:-$(scripts/cuda-toolchain.sh)}
site=$(scripts/triton.sh)
cargo build --release --locked -p gasan-ptxas -p gasan-instrument -p gasan-runtime 2>&1 | tail -1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
front=$PWD/target/release/gasan-ptxas
revision=$(sed -n 's/^pub const REVISION: u32 = \([0-9]*\);/\1/p' instrument/src/ptx/mod.rs)
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" TRITON_CACHE_DIR="$tmp/triton-cache" TRITON_HOME="$tmp/triton-home"
unset GASAN_OPTIONS GASAN_REAL_PTXAS GASAN_REAL_PTXAS_BLACKWELL TRITON_PTXAS_PATH TRITON_PTXAS_BLACKWELL_PATH

# Triton's view of each ptxas: the path it will run, the CUDA release it read, its cache-key text.
triton_view() {
  python3 -c '
from triton import knobs
from triton.backends.nvidia.compiler import get_ptxas_version
t = knobs.nvidia.ptxas
print(t.path); print(t.version); print(get_ptxas_version(90), end="")'
}
native_view=$(TRITON_PTXAS_PATH="$cuda/bin/ptxas" triton_view)
checked_view=$(TRITON_PTXAS_PATH="$front" GASAN_REAL_PTXAS="$cuda/bin/ptxas" triton_view)
[ "$(sed -n 1p <<<"$checked_view")" = "$front" ] || { echo "Triton refused gasan-ptxas's --version answer and fell back to: $(sed -n 1p <<<"$checked_view")"; exit 1; }
[ "$(sed -n 2p <<<"$checked_view")" = "$(sed -n 2p <<<"$native_view")" ] || { echo "CUDA release differs: $(sed -n 2p <<<"$checked_view") vs $(sed -n 2p <<<"$native_view")"; exit 1; }
[ "$(sed -n '3,$p' <<<"$checked_view")" != "$(sed -n '3,$p' <<<"$native_view")" ] || { echo "gasan-ptxas's --version answer is the native one: Triton's cache would mix cubins"; exit 1; }
echo "Triton runs gasan-ptxas (CUDA release $(sed -n 2p <<<"$checked_view")); its cache key reads: $(tail -1 <<<"$checked_view")"

TRITON_PTXAS_PATH="$cuda/bin/ptxas" python3 jit/triton/kernels.py "$tmp/native" >/dev/null
TRITON_PTXAS_PATH="$front" GASAN_REAL_PTXAS="$cuda/bin/ptxas" GASAN_OPTIONS="cache_dir=$tmp/gasan-cache" \
  python3 jit/triton/kernels.py "$tmp/checked" >/dev/null
TRITON_PTXAS_PATH="$cuda/bin/ptxas" python3 jit/triton/kernels.py "$tmp/native-again" >/dev/null
for c in "$tmp"/native/*.cubin; do
  cmp -s "$c" "$tmp/native-again/${c##*/}" || { echo "${c##*/}: a native run after the checked one got another cubin"; exit 1; }
done
python3 jit/triton/check.py "$tmp/native" "$tmp/checked" target/release/gasan-ptx "$revision" "$tmp/forms.md" "$cuda/bin/ptxas"

# gasan-run with no real ptxas named: the front end finds the running Triton's bundled ptxas.
target/release/gasan-run --cache-dir "$tmp/gasan-cache" -- python3 -c '
import sys
from triton import knobs
for t in (knobs.nvidia.ptxas, knobs.nvidia.ptxas_blackwell):
    assert "jit-tools-" in t.path, t.path
    print(t.version, end=" ")' >"$tmp/bundled-release"
[ "$(cat "$tmp/bundled-release")" = "12.8 12.9 " ] || { echo "under gasan-run Triton saw CUDA releases $(cat "$tmp/bundled-release"), not its bundled 12.8 and 12.9"; exit 1; }
target/release/gasan-run --cache-dir "$tmp/gasan-cache" -- python3 jit/triton/kernels.py "$tmp/bundled" vector_add softmax >/dev/null
target/release/gasan-run --cache-dir "$tmp/gasan-cache" -- python3 jit/triton/kernels.py --arch 100 "$tmp/blackwell" >/dev/null
python3 - "$tmp" <<'PY'
import sys
sys.path.insert(0, "jit/triton")
import check
import kernels
for d, names in (("bundled", ["vector_add", "softmax"]), ("blackwell", list(kernels.KERNELS))):
    for name in names:
        cubin = f"{sys.argv[1]}/{d}/{name}.cubin"
        assert check.marker(cubin) is not None and check.tables(cubin) is not None, f"{d}/{name}: not checked under gasan-run"
print(f"gasan-run: Triton's bundled ptxas 12.8 (sm_90a: vector_add, softmax) and ptxas-blackwell 12.9 (sm_100a: all {len(kernels.KERNELS)} kernels, tcgen05 matmuls and TMA among them) behind the front end; every cubin checked")
PY
# The GPU tests' Triton bug cases (runtime/gpu/python/triton_bugs.py): each case's marked Python line
# has a checked site of the expected access in the expected kernel.
runtime/gpu/python/triton_aot_check.sh
