#!/usr/bin/env bash
# Kernel patch loaded for real (issue 17), CPU only: kmod-patch/vm-test.sh boots Debian's 6.1 kernel
# in QEMU (TCG), loads the patched nvidia-uvm.ko on a stand-in for nvidia.ko (no GPU) and runs
# kmod-patch/vm-selftest.c's malformed-parameter checks against the real module code, then unloads.
# Nothing is loaded on this machine. Skipped, visibly, where qemu-system-x86_64 is not installed.
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v "${QEMU:-qemu-system-x86_64}" >/dev/null; then
  echo "SKIPPED: kernel patch in a VM (kmod-patch/vm-test.sh): no qemu-system-x86_64 on this machine (apt-get install qemu-system-x86)"
  exit 0
fi
eval "$(kmod-patch/fetch.sh | sed 's/^/export /')"
bash kmod-patch/vm-test.sh 2>&1 | grep -E '^(VM|vm-test|vm-selftest|modules:|qemu exit)' | grep -v 'Unknown symbol'
