#!/usr/bin/env bash
# Loads the patched modules for real, in a QEMU guest on a CPU machine (kmod-patch/README.md,
# "Loading in a VM"). Builds the gasan nvidia-uvm.ko (and, unless GASAN_VM_NVIDIA_KO=0, nvidia.ko)
# against bookworm's 6.1 headers (kmod-patch/fetch.sh), boots the matching Debian kernel image
# (pinned in scripts/debs.lock, or the newest 6.1 one once Debian drops the pin:
# scripts/deb-fetch.sh --kernel) with a busybox initramfs, and inside the guest:
#   1. insmod nvidia.ko            (cannot stay loaded without a GPU; recorded, not required)
#   2. insmod nvidia-uvm.ko        (without nvidia.ko: unknown nvUvmInterface* symbols)
#   3. insmod nvidia-stub.ko, nvidia-uvm.ko: a stand-in for nvidia.ko (kmod-patch/mkstub.sh: every
#      nvUvmInterface* function of the branch's header with its exact prototype; SessionCreate and
#      the callback registration succeed, everything else returns NV_ERR_NOT_SUPPORTED), so the
#      real nvidia-uvm code loads and its ioctls run; kmod-patch/vm-selftest.c (static) then sends
#      the malformed-parameter half of `gasan-uvm kmod-selftest` and creates and tears down real
#      state (pool, windows, the fault fd, fork, threads, exit with everything live); rmmod both.
# Prints the guest console, then checks it (every step's kernel log: no BUG, WARNING, Oops, ...).
# Exit: 0 passed, 1 failed, 77 skipped (no qemu). Nothing is loaded on the host.
#
#   kmod-patch/vm-test.sh [--branch 550|580|595] [--src DIR]
# 550 (default) uses Debian's tree (fetch.sh); other branches need --src, an unpacked
# open-gpu-kernel-modules tree of that branch (the repository or its kernel-open/).
# Env: QEMU (default qemu-system-x86_64 on PATH), GASAN_VM_TIMEOUT (seconds, default 300),
# GASAN_VM_NVIDIA_KO (1: also build nvidia.ko and try it in the guest; default 1 for 550, 0 for the
# others: nvidia.ko is most of the build time and cannot stay loaded anyway), GASAN_VM_MODULES
# (a directory with nvidia-uvm.ko and nvidia-stub.ko already built by build.sh --nvidia-symvers and
# mkstub.sh from the branch's tree: boots those instead of building; the branch's tree is still
# needed for its version), GASAN_KMOD_CACHE as fetch.sh.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
cache=${GASAN_KMOD_CACHE:-${GASAN_CACHE:-$top/.cache}/kmod}
qemu=${QEMU:-qemu-system-x86_64}
. "$here/branches.sh"
branch=550 tree=""
while [ $# -gt 0 ]; do
  case "$1" in
    --branch) branch=${2:?--branch needs a number}; shift 2 ;;
    --src) tree=${2:?--src needs a directory}; shift 2 ;;
    *) echo "vm-test.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
series_dir=$(gasan_branch_series "$branch") || { echo "vm-test.sh: no branch '$branch' (supported: $gasan_branches)" >&2; exit 2; }
command -v "$qemu" >/dev/null || { echo "SKIPPED: no $qemu (apt-get install qemu-system-x86, or set QEMU)"; exit 77; }
# SRC, KDIR and the kernel (KVER, KPKG: pinned in scripts/debs.lock, or resolved when Debian dropped it).
eval "$("$here/fetch.sh" | sed 's/^/export /')"
if [ "$branch" = 550 ] && [ -z "$tree" ]; then tree="$SRC/modules/nvidia-open-kernel"; fi
[ -n "$tree" ] || { echo "vm-test.sh: --branch $branch needs --src (open-gpu-kernel-modules at $(gasan_branch_tested "$branch"))" >&2; exit 2; }
[ -d "$tree/kernel-open" ] && tree="$tree/kernel-open"
got=$(gasan_branch_of_tree "$tree") || exit 2
[ "$got" = "$branch" ] || { echo "vm-test.sh: '$tree' is branch $got, not $branch" >&2; exit 2; }
nvidia_ko=${GASAN_VM_NVIDIA_KO:-$([ "$branch" = 550 ] && echo 1 || echo 0)}

# 1. Modules, kept under $cache/build/<hash of the branch's version and series, the build and
# stand-in scripts, the kernel and this step's version> (bump "modules v4" when this step changes).
key=$( (gasan_tree_version "$tree"; cat "$here/$series_dir"/* "$here/build.sh" "$here/mkstub.sh"; echo "modules v4 nvidia.ko=$nvidia_ko $KVER $KPKG") | sha256sum | cut -c1-16)
out="$cache/build/$key"
if [ -n "${GASAN_VM_MODULES:-}" ]; then
  out=$(cd "$GASAN_VM_MODULES" && pwd)
  for k in nvidia-uvm.ko nvidia-stub.ko; do [ -f "$out/$k" ] || { echo "vm-test.sh: no $k in $out" >&2; exit 2; }; done
  [ "$(strings "$out/nvidia-uvm.ko" | sed -n 's/^version=//p' | head -1)" = "$(gasan_tree_version "$tree")" ] ||
    { echo "vm-test.sh: $out/nvidia-uvm.ko is not version $(gasan_tree_version "$tree")" >&2; exit 2; }
elif [ ! -f "$out/done" ]; then
  # (An interrupted build resumes in $out.tmp/tree: build.sh and make are incremental.)
  if [ ! -f "$out.tmp/tree/Kbuild" ]; then
    rm -rf "$out.tmp" && mkdir -p "$out.tmp"
    cp -a "$tree/." "$out.tmp/tree"
  fi
  if [ "$nvidia_ko" = 1 ]; then
    # nvidia-uvm.ko exactly as DKMS builds it: nvidia.ko built alongside, so its imports carry
    # nvidia.ko's symbol versions.
    bash "$here/build.sh" --src "$out.tmp/tree" --kdir "$KDIR" --jobs "$(nproc)"
    cp "$out.tmp/tree/nvidia.ko" "$out.tmp/"
  fi
  # The stand-in, from the branch's own nv_uvm_interface.h.
  bash "$here/mkstub.sh" "$out.tmp/tree" "$out.tmp/stub"
  make -C "$KDIR" M="$out.tmp/stub" modules >"$out.tmp/stub.log" 2>&1 || { cat "$out.tmp/stub.log" >&2; exit 1; }
  cp "$out.tmp/stub/nvidia-stub.ko" "$out.tmp/"
  # The guest's nvidia-uvm.ko: the same code, its imports versioned against the stand-in's exports
  # (a symbol nvidia-uvm imports that the stand-in lacks fails this build).
  bash "$here/build.sh" --src "$out.tmp/tree" --kdir "$KDIR" --jobs "$(nproc)" --nvidia-symvers "$out.tmp/stub/Module.symvers"
  cp "$out.tmp/tree/nvidia-uvm.ko" "$out.tmp/nvidia-uvm.ko"
  rm -rf "$out.tmp/tree"
  touch "$out.tmp/done"
  rm -rf "$out" && mv "$out.tmp" "$out"
fi
echo "modules: branch $branch ($(gasan_tree_version "$tree")): $(cd "$out" && echo *.ko) in $out"

# 2. The guest: Debian's kernel image (same version as the headers) and busybox, both pinned.
vmroot="$cache/vmroot"
"$top/scripts/deb-fetch.sh" "linux-image-$KVER-amd64" "$KPKG" "$vmroot"
"$top/scripts/deb-fetch.sh" busybox-static 1:1.35.0-4+deb12u1+b1 "$vmroot"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
ird="$work/initrd"
mkdir -p "$ird"/{bin,proc,sys,dev,tmp}
cp "$vmroot/bin/busybox" "$ird/bin/busybox"
for k in "$out"/*.ko; do strip --strip-debug -o "$ird/$(basename "$k")" "$k"; done
gcc -static -O2 -Wall -Wextra -Werror -pthread -I "$here/include" "$here/vm-selftest.c" -o "$ird/vm-selftest"
cat >"$ird/init" <<'EOF'
#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
echo 4 > /proc/sys/kernel/printk
echo "VM: $(uname -r), $(grep -c ^processor /proc/cpuinfo) cpu"
step() { echo "VM-STEP: $*"; dmesg -c >/dev/null; }
show() { echo "VM-RC: $1"; dmesg -c | sed 's/^/VM-DMESG: /'; }
if [ -f /nvidia.ko ]; then step "insmod nvidia.ko"; insmod /nvidia.ko; show $?; fi
step "insmod nvidia-uvm.ko (nvidia.ko not loaded)"; insmod /nvidia-uvm.ko; show $?
step "insmod nvidia-stub.ko"; insmod /nvidia-stub.ko; show $?
step "insmod nvidia-uvm.ko (on the stand-in)"; insmod /nvidia-uvm.ko; show $?
major=$(awk '$2 == "nvidia-uvm" {print $1; exit}' /proc/devices)
echo "VM: nvidia-uvm major ${major:-none}, gasan_abi $(cat /sys/module/nvidia_uvm/parameters/gasan_abi 2>/dev/null || echo none)"
if [ -n "$major" ]; then
  mknod /dev/nvidia-uvm c "$major" 0
  step "vm-selftest"; /vm-selftest; show $?
  step "rmmod nvidia-uvm"; rmmod nvidia-uvm; show $?
  step "rmmod nvidia-stub"; rmmod nvidia-stub; show $?
fi
echo "VM-DONE"
poweroff -f
EOF
chmod +x "$ird/init"
(cd "$ird" && find . | "$vmroot/bin/busybox" cpio -o -H newc 2>/dev/null | gzip -1) >"$work/initrd.gz"

# TCG by default: on this project's CI hosts /dev/kvm exists but nested KVM fails (-cpu max: "failed
# to set MSR 0x10a"; default CPU: the guest hangs with no console output). GASAN_VM_KVM=1 opts in.
accel=tcg
[ "${GASAN_VM_KVM:-0}" = 1 ] && [ -w /dev/kvm ] && accel=kvm
echo "booting $vmroot/boot/vmlinuz-$KVER-amd64 under $qemu ($accel)"
set +e
timeout "${GASAN_VM_TIMEOUT:-300}" "$qemu" -accel "$accel" -cpu max -m 1G -smp 1 -nographic -no-reboot -nic none \
  -kernel "$vmroot/boot/vmlinuz-$KVER-amd64" -initrd "$work/initrd.gz" \
  -append 'console=ttyS0 panic=-1 loglevel=4' </dev/null | tr -d '\r' | tee "$work/console"
qrc=${PIPESTATUS[0]}
set -e
cp "$work/console" "$cache/vm-console-$branch.log"
echo "qemu exit status $qrc; console kept in $cache/vm-console-$branch.log"
fail=0
need() { grep -q -- "$1" "$work/console" || { echo "vm-test: missing from the console: $1" >&2; fail=1; }; }
need "VM-DONE"
# nvidia.ko itself cannot stay loaded here (no GPU: -ENODEV; in this minimal guest it already stops
# at its DRM imports): recorded, not required.
if grep -q "VM-STEP: insmod nvidia.ko$" "$work/console"; then
  grep -A1 "VM-STEP: insmod nvidia.ko$" "$work/console" | tail -1 | sed 's/^/vm-test: nvidia.ko (informational): /'
fi
need "VM: nvidia-uvm major [0-9]*, gasan_abi 2"
need "vm-selftest: [0-9]* passed, 0 failed"
grep -A1 "VM-STEP: rmmod" "$work/console" | grep -q "VM-RC: [^0]" && { echo "vm-test: rmmod failed" >&2; fail=1; }
grep -qE "BUG:|Oops|WARNING:|general protection|KASAN|Call Trace|Assert|gasan: " "$work/console" && { echo "vm-test: kernel warnings in the guest" >&2; fail=1; }
[ $fail = 0 ] && echo "vm-test: passed" || echo "vm-test: FAILED"
exit $fail
