#!/usr/bin/env bash
# Code size and registers of checked modules under two gasan-ptx binaries: instruments every module
# of the PTX corpus (.cache/identical-corpus, see identical.sh) with each binary, assembles both
# with ptxas (-arch=sm_90 -O3 -v --suppress-debug-info, the runtime's flags) and compares, per
# kernel, registers and spill bytes, and per module the cubin's size and its code's (the .text
# sections: in a whole-program cubin each kernel's holds its own copy of every function it calls).
# Usage: instrument/outline_sizes.sh OLD_GASAN_PTX [NEW_GASAN_PTX] [FLAGS...]
# Writes OUT_DIR (default /tmp/outline-sizes)/kernels.tsv (module, kernel, old/new registers,
# old/new spill stores+loads) and modules.tsv (module, old/new cubin bytes, old/new .text bytes),
# prints totals and
# every kernel whose registers or spills changed; exits 1 when any kernel gained a spill.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
old=${1:?usage: instrument/outline_sizes.sh OLD_GASAN_PTX [NEW_GASAN_PTX] [FLAGS...]}
new=${2:-$root/target/release/gasan-ptx}
shift $(( $# >= 2 ? 2 : 1 ))
flags=("$@")
cuda=$("$root/scripts/cuda-toolchain.sh")
corpus="${GASAN_CACHE:-$root/.cache}/identical-corpus"
out=${OUT_DIR:-/tmp/outline-sizes}
mkdir -p "$out"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# `ptxas -v`'s report as "kernel<TAB>registers<TAB>spill stores+loads" lines.
regs() {
  awk '/Compiling entry function/ { k = $0; sub(/.*function .\x27?/, "", k); sub(/\x27.*/, "", k) }
       /bytes spill stores/ { if (k != "") { sp = $5 + $9 } }
       /Used [0-9]+ registers/ { if (k != "") { for (i = 1; i <= NF; i++) if ($i == "Used") r = $(i + 1); print k "\t" r "\t" sp; k = "" } }'
}
# The bytes of a cubin's .text sections.
text_bytes() {
  readelf -SW "$1" 2>/dev/null | awk '{ sub(/^ *\[ *[0-9]+\] */, "") } $1 ~ /^\.text/ { s += ("0x" $5) + 0 } END { print s + 0 }'
}
: >"$out/kernels.tsv"; : >"$out/modules.tsv"
for p in "$corpus"/*.ptx; do
  m=$(basename "$p" .ptx)
  # Separately compiled (-rdc) modules call functions of others: assembled as relocatable code.
  reloc=(); grep -qE '^[[:space:]]*\.extern[[:space:]]+\.func' "$p" && reloc=(-c)
  for side in old new; do
    bin=$old; [ $side = new ] && bin=$new
    "$bin" instrument "${flags[@]}" "$p" -o "$tmp/$side.ptx" --sites "$tmp/$side.json" >/dev/null 2>&1 || { echo "$m: $side instrument failed" >&2; continue 2; }
    "$cuda/bin/ptxas" "${reloc[@]}" -arch=sm_90 -O3 -v --suppress-debug-info "$tmp/$side.ptx" -o "$tmp/$side.cubin" 2>"$tmp/$side.log" || { echo "$m: $side ptxas failed" >&2; cat "$tmp/$side.log" >&2; exit 2; }
    regs <"$tmp/$side.log" | sort >"$tmp/$side.regs"
  done
  printf '%s\t%s\t%s\t%s\t%s\n' "$m" "$(stat -c %s "$tmp/old.cubin")" "$(stat -c %s "$tmp/new.cubin")" "$(text_bytes "$tmp/old.cubin")" "$(text_bytes "$tmp/new.cubin")" >>"$out/modules.tsv"
  join -t $'\t' "$tmp/old.regs" "$tmp/new.regs" | awk -v m="$m" -F'\t' '{ print m "\t" $1 "\t" $2 "\t" $4 "\t" $3 "\t" $5 }' >>"$out/kernels.tsv"
done
awk -F'\t' '{ o += $2; n += $3; to += $4; tn += $5 }
  END { printf "cubin bytes: old %d new %d (%+.1f%%); .text bytes: old %d new %d (%+.1f%%); %d modules\n", o, n, 100 * (n - o) / o, to, tn, 100 * (tn - to) / to, NR }' "$out/modules.tsv"
awk -F'\t' '{ k++; if ($4 > $3) up++; if ($4 < $3) down++; if ($6 > $5) sp++ }
  END { printf "kernels: %d, registers up %d, down %d, more spill bytes %d\n", k, up, down, sp }' "$out/kernels.tsv"
awk -F'\t' '$3 != $4 || $5 != $6 { print "  " $1 " " $2 ": registers " $3 " -> " $4 ", spill bytes " $5 " -> " $6 }' "$out/kernels.tsv"
awk -F'\t' '$6 > $5 { spilled = 1 } END { exit spilled }' "$out/kernels.tsv"
