#!/usr/bin/env bash
# Kernel patch loaded for real (issue 17), CPU only: kmod-patch/vm-test.sh boots Debian's 6.1 kernel
# in QEMU (TCG), loads the patched nvidia-uvm.ko on a stand-in for nvidia.ko (no GPU) and runs
# kmod-patch/vm-selftest.c's malformed-parameter checks against the real module code, then unloads.
# Nothing is loaded on this machine. QEMU: the machine's, else Debian's fetched pinned and unpacked
# under .cache/qemu (scripts/qemu-fetch.sh, no root); skipped, visibly, only if that fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ -z "${QEMU:-}" ]; then
  if ! QEMU=$(scripts/qemu-fetch.sh); then
    echo "SKIPPED: kernel patch in a VM (kmod-patch/vm-test.sh): no qemu-system-x86_64 here and Debian's could not be fetched (scripts/qemu-fetch.sh)"
    exit 0
  fi
  export QEMU
fi
echo "qemu: $QEMU"
eval "$(kmod-patch/fetch.sh | sed 's/^/export /')"
bash kmod-patch/vm-test.sh 2>&1 | grep -E '^(VM|vm-test|vm-selftest|modules:|qemu exit)' | grep -v 'Unknown symbol'
