#!/usr/bin/env bash
# Kernel patch loaded for real (issue 17), CPU only: kmod-patch/vm-test.sh boots Debian's 6.1 kernel
# in QEMU (TCG), loads the patched nvidia-uvm.ko on a stand-in for nvidia.ko (no GPU) and runs
# kmod-patch/vm-selftest.c's malformed-parameter checks against the real module code, then unloads.
# Nothing is loaded on this machine. QEMU: the machine's, else Debian's fetched pinned (or resolved
# from Debian's signed index once a pin is gone) and unpacked under .cache/qemu (scripts/qemu-fetch.sh,
# no root). The project fetches everything this step needs, so a failed fetch fails it under CI=true
# (.ci/run); elsewhere it is a visible skip.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ -z "${QEMU:-}" ]; then
  if ! QEMU=$(scripts/qemu-fetch.sh); then
    why="no qemu-system-x86_64 here and Debian's could not be fetched (scripts/qemu-fetch.sh)"
    [ "${CI:-}" = true ] && { echo "kernel patch in a VM: $why; under CI that is a failure, not a skip" >&2; exit 1; }
    echo "SKIPPED: kernel patch in a VM (kmod-patch/vm-test.sh): $why"
    exit 0
  fi
  export QEMU
fi
echo "qemu: $QEMU ($("$QEMU" --version | head -1))"
eval "$(kmod-patch/fetch.sh | sed 's/^/export /')"
echo "kernel: linux-image-$KVER-amd64 $KPKG"
# The guest's lines and the verdict; on a failure (a module that does not build against the kernel,
# say) the end of the whole output too.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
rc=0
bash kmod-patch/vm-test.sh >"$log" 2>&1 || rc=$?
grep -E '^(VM|vm-test|vm-selftest|modules:|qemu exit|deb-fetch.sh:)' "$log" | grep -v 'Unknown symbol' || true
if [ "$rc" -ne 0 ]; then
  echo "kmod-patch/vm-test.sh failed (exit $rc); the end of its output:" >&2
  tail -40 "$log" >&2
fi
# The Debian packages used in place of pins that Debian has dropped (scripts/deb-fetch.sh).
resolved=${GASAN_DEB_CACHE:-${GASAN_CACHE:-.cache}/debs}/resolved-versions
if [ -s "$resolved" ]; then
  echo "debian packages resolved from the signed index (pinned -> used; scripts/deb-pin.sh re-pins):"
  awk '{printf "  %s %s -> %s %s (%s, %s)\n", $1, $2, $3, $4, $8, $9}' "$resolved"
else
  echo "debian packages: all as pinned in scripts/debs.lock"
fi
exit "$rc"
