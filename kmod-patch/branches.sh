# Sourced by build.sh, mkseries.sh and vm-test.sh: the driver branches the series supports, the
# exact version each was tested with, and where its series lives. A branch is the first number of
# NVIDIA's version (550.163.01 -> 550). Adding a branch: a glue header src/glue/<branch>.h, a series
# in patches-<branch>/ (mkseries.sh --branch <branch> --src <pristine tree>), a dkms-<branch>.conf,
# and a line in each function below.
gasan_branches="550 580 595"

# The version the branch's series was made against and tested with.
gasan_branch_tested() {
  case "$1" in
    550) echo 550.163.01 ;;
    580) echo 580.142 ;;
    595) echo 595.45.04 ;;
    *) return 1 ;;
  esac
}

# Where the unpatched tree of the tested version comes from.
gasan_branch_source() {
  case "$1" in
    550) echo "Debian nvidia-open-kernel-source 550.163.01-2 (trixie contrib), modules/nvidia-open-kernel (kmod-patch/fetch.sh)" ;;
    *) echo "NVIDIA/open-gpu-kernel-modules tag $(gasan_branch_tested "$1"), kernel-open/" ;;
  esac
}

# The series directory, relative to kmod-patch/ (550 keeps patches/, where CI reads it).
gasan_branch_series() {
  gasan_branch_tested "$1" >/dev/null || return 1
  if [ "$1" = 550 ]; then echo patches; else echo "patches-$1"; fi
}

# The version of an open-module tree (the directory holding Kbuild and nvidia-uvm/): Kbuild's
# NV_VERSION_STRING, else version.mk one or two levels up (the GitHub repository's layout).
gasan_tree_version() {
  local v
  v=$(sed -n 's/.*-DNV_VERSION_STRING=\\"\([0-9][0-9.]*\)\\".*/\1/p' "$1/Kbuild" 2>/dev/null | head -1)
  if [ -z "$v" ]; then
    for mk in "$1/version.mk" "$1/../version.mk"; do
      [ -f "$mk" ] && v=$(sed -n 's/^NVIDIA_VERSION *= *\([0-9][0-9.]*\).*/\1/p' "$mk" | head -1) && [ -n "$v" ] && break
    done
  fi
  [ -n "$v" ] && echo "$v"
}

# Refuses, by name, a tree of a branch without a series. Prints the branch.
gasan_branch_of_tree() {
  local v b
  v=$(gasan_tree_version "$1") || { echo "${0##*/}: no NV_VERSION_STRING in $1/Kbuild nor a version.mk: not an NVIDIA open kernel module tree?" >&2; return 1; }
  b=${v%%.*}
  if ! gasan_branch_tested "$b" >/dev/null; then
    echo "${0##*/}: driver $v (branch $b) is not supported; supported branches: $(for x in $gasan_branches; do printf '%s (tested %s) ' "$x" "$(gasan_branch_tested "$x")"; done)" >&2
    return 1
  fi
  echo "$b"
}
