#!/usr/bin/env bash
# deb-fetch.sh PACKAGE VERSION ROOT
#   Gets one Debian package pinned in scripts/debs.lock (or one that a pin resolved to, see below)
#   into the cache and unpacks it into ROOT without installing anything. Used for qemu, the VM's
#   kernel and busybox, the kernel headers, NVIDIA's open module source and libclang, so CI needs
#   no root and no apt.
# deb-fetch.sh --kernel
#   Prints "KVER KPKG" (e.g. "6.1.0-50 6.1.176-1") of the kernel to build for and boot, with its
#   image, header and kbuild packages in the cache; fetch them by name with the first form.
#
# Sources, in order (every file is checked by SHA-256 before use):
#   1. the cache (GASAN_DEB_CACHE, default $GASAN_CACHE/debs, GASAN_CACHE defaulting to .cache);
#   2. the pinned file at its pool path: pool/updates/... in Debian's security archive
#      ($DEBIAN_SECURITY_MIRROR), anything else in the main archive ($DEBIAN_MIRROR);
#      then snapshot.debian.org by the pin's SHA1 ($DEBIAN_SNAPSHOT; often unreachable);
#   3. once Debian has dropped the pinned version, the pin's POLICY (debs.lock) decides:
#      newest  the same package's current version in the pin's release (bookworm, bookworm-updates,
#              bookworm-security), found in Debian's signed index by scripts/debian_index.py
#              (InRelease checked by gpgv against Debian's archive keyring, Packages.xz by the
#              SHA-256 the Release signs, the .deb by the SHA-256 in Packages);
#      kernel  the release's newest kernel of the same ABI series (6.1.0-* for bookworm) whose
#              image, headers and kbuild exist at one version, resolved as a whole (--kernel);
#      exact   nothing: the fetch fails (the kmod patch series targets that exact NVIDIA source).
#   What a pin resolved to is kept in $GASAN_DEB_CACHE/resolved-versions (one line each: PINNED-PACKAGE
#   PINNED-VERSION PACKAGE VERSION SHA256 ARCHIVE POOL-PATH SUITE DATE), printed when used and
#   reused offline; scripts/deb-pin.sh turns a resolved version into a new pin.
# The keyring: $DEBIAN_KEYRING, else /usr/share/keyrings/debian-archive-keyring.gpg, else the
# debian-archive-keyring package pinned (exact) in debs.lock.
# Env: DEBIAN_MIRROR (default http://deb.debian.org/debian), DEBIAN_SECURITY_MIRROR (default
# http://deb.debian.org/debian-security), DEBIAN_SNAPSHOT (default https://snapshot.debian.org),
# DEBIAN_KEYRING, GASAN_DEB_CACHE, GASAN_DEBS_LOCK (default scripts/debs.lock).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
lock=${GASAN_DEBS_LOCK:-$top/scripts/debs.lock}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
security=${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
snapshot=${DEBIAN_SNAPSHOT:-https://snapshot.debian.org}
cache=${GASAN_DEB_CACHE:-${GASAN_CACHE:-$top/.cache}/debs}
resolved="$cache/resolved-versions"
export GASAN_DEB_INDEX_CACHE="$cache/index"
usage() { echo "usage: deb-fetch.sh PACKAGE VERSION ROOT | deb-fetch.sh --kernel" >&2; exit 2; }
case $# in
  1) [ "$1" = --kernel ] || usage ;;
  3) case $1 in -*) usage ;; esac ;;
  *) usage ;;
esac
say() { echo "deb-fetch.sh: $*" >&2; }
mkdir -p "$cache"
# One fetch at a time per cache: the resolved-versions file and the downloads are shared.
exec 8>"$cache/.lock"
flock 8

# The lock line of PACKAGE VERSION: "SHA256 SHA1 POOL-PATH DIST POLICY".
pin() { awk -v p="$1" -v v="$2" '!/^#/ && $1 == p && $2 == v {print $3, $4, $5, $6, $7; exit}' "$lock"; }
# The resolved-versions line of a pin (by=pin) or of the package it resolved to (by=got).
record() {
  [ -f "$resolved" ] || return 0
  awk -v by="$1" -v p="$2" -v v="$3" 'by == "pin" && $1 == p && $2 == v || by == "got" && $3 == p && $4 == v {l = $0} END {if (l) print l}' "$resolved"
}
remember() { # PINNED-PACKAGE PINNED-VERSION PACKAGE VERSION SHA256 ARCHIVE POOL-PATH SUITE
  { [ -f "$resolved" ] && awk -v p="$1" -v v="$2" '!($1 == p && $2 == v)' "$resolved"; echo "$* $(date -u +%F)"; } >"$resolved.tmp"
  mv "$resolved.tmp" "$resolved"
}
archive_of() { case $1 in pool/updates/*) echo "$security" ;; *) echo "$mirror" ;; esac; }
component_of() { local p=${1#pool/}; p=${p#updates/}; echo "${p%%/*}"; }
cached() { echo "$1  $cache/$(basename "$2")" | sha256sum -c --status 2>/dev/null; } # SHA256 POOL-PATH
# download SHA256 POOL-PATH URL...: the first URL whose body has SHA256 goes to the cache.
download() {
  local sum=$1 file=$2 deb="$cache/$(basename "$2")" url
  shift 2
  for url in "$@"; do
    if curl -fsSL --connect-timeout 20 -o "$deb.tmp" "$url" 2>/dev/null && echo "$sum  $deb.tmp" | sha256sum -c --status; then
      mv "$deb.tmp" "$deb"
      say "fetched $(basename "$deb") from $url"
      return 0
    fi
  done
  rm -f "$deb.tmp"
  say "no file with SHA-256 $sum at: $*"
  return 1
}
fetch_pinned() { # PACKAGE VERSION: the pinned file in the cache, from the archive or the snapshot
  local sum sha1 file
  read -r sum sha1 file _ < <(pin "$1" "$2")
  cached "$sum" "$file" || download "$sum" "$file" "$(archive_of "$file")/$file" "$snapshot/file/$sha1"
}
keyring() { # sets DEBIAN_KEYRING for debian_index.py
  [ -n "${DEBIAN_KEYRING:-}" ] && return 0
  DEBIAN_KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
  if [ ! -r "$DEBIAN_KEYRING" ]; then
    local line sum file
    line=$(awk '!/^#/ && $1 == "debian-archive-keyring" {print $2; exit}' "$lock")
    [ -n "$line" ] || { say "no Debian archive keyring here and none pinned in $lock"; return 1; }
    read -r sum _ file _ < <(pin debian-archive-keyring "$line")
    fetch_pinned debian-archive-keyring "$line" || { say "cannot fetch the pinned debian-archive-keyring $line"; return 1; }
    mkdir -p "$cache/keyring"
    dpkg-deb -x "$cache/$(basename "$file")" "$cache/keyring"
    DEBIAN_KEYRING="$cache/keyring/usr/share/keyrings/debian-archive-keyring.gpg"
  fi
  export DEBIAN_KEYRING
}
# use_record LINE: LINE's package is in the cache (downloaded again from its archive if need be).
use_record() {
  local sum archive file
  read -r _ _ _ _ sum archive file _ <<<"$1"
  cached "$sum" "$file" || download "$sum" "$file" "$archive/$file"
}

if [ "$1" = --kernel ]; then
  read -r image kpkg dist < <(awk '!/^#/ && $7 == "kernel" && $1 ~ /^linux-image-/ {print $1, $2, $6; exit}' "$lock") || true
  [ -n "${image:-}" ] || { say "no kernel image pinned in $lock (POLICY kernel)"; exit 1; }
  kver=${image#linux-image-}
  flavour=${kver##*-}
  kver=${kver%-*}
  series=${kver%-*}
  mapfile -t members < <(awk -v v="$kpkg" '!/^#/ && $7 == "kernel" && $2 == v {print $1}' "$lock")
  all() { local m; for m in "${members[@]}"; do "$@" "$m" || return 1; done; }
  pinned_cached() { local sum file; read -r sum _ file _ < <(pin "$1" "$kpkg"); cached "$sum" "$file"; }
  recorded() { local r; r=$(record pin "$1" "$kpkg"); [ -n "$r" ] && use_record "$r"; }
  if all pinned_cached; then
    echo "$kver $kpkg"
  elif all recorded; then
    read -r _ _ rimage rv _ < <(record pin "$image" "$kpkg")
    say "kernel: using $rimage $rv (resolved; the pinned $image $kpkg is gone)"
    rver=${rimage#linux-image-}
    echo "${rver%-*} $rv"
  elif fetch_member() { fetch_pinned "$1" "$kpkg"; } && all fetch_member; then
    echo "$kver $kpkg"
  else
    say "kernel: the pinned $image $kpkg is gone from Debian; resolving the newest $series-*-$flavour kernel of $dist"
    keyring
    out=$(python3 "$top/scripts/debian_index.py" kernel "$dist" "$series" "$flavour") || exit 1
    mapfile -t got <<<"$out"
    [ ${#got[@]} -eq 4 ] || { say "kernel: resolution gave ${#got[@]} packages, not 4"; exit 1; }
    for g in "${got[@]}"; do
      read -r p v sum archive file suite <<<"$g"
      download "$sum" "$file" "$archive/$file" || { say "$archive/$file does not match its signed index"; exit 1; }
      # The pinned member this one replaces: the same name with the pinned ABI.
      m=$(sed -E "s/^(linux-(image|headers)-$series)-[0-9]+-/\1-${kver##*-}-/" <<<"$p")
      remember "$m" "$kpkg" "$p" "$v" "$sum" "$archive" "$file" "$suite"
      say "kernel: $m $kpkg -> $p $v ($suite, verified by the signed index)"
    done
    read -r rimage rv _ <<<"${got[0]}"
    rver=${rimage#linux-image-}
    echo "${rver%-*} $rv"
  fi
  exit 0
fi

pkg=$1 ver=$2 root=$3
line=$(pin "$pkg" "$ver")
if [ -n "$line" ]; then
  read -r sum sha1 file dist policy <<<"$line"
  if cached "$sum" "$file"; then
    :
  elif [ "$policy" != kernel ] && r=$(record pin "$pkg" "$ver") && [ -n "$r" ] && use_record "$r"; then
    read -r _ _ _ rv sum _ file suite _ <<<"$r"
    say "$pkg: using $rv from $suite (resolved; the pinned $ver is gone)"
  elif fetch_pinned "$pkg" "$ver"; then
    :
  else
    case $policy in
      newest)
        say "$pkg $ver is gone from Debian; resolving its current version in $dist's signed index"
        keyring
        read -r _ rv sum archive file suite < <(python3 "$top/scripts/debian_index.py" resolve "$dist" "$(component_of "$file")" "$pkg") ||
          { say "cannot resolve $pkg in $dist"; exit 1; }
        download "$sum" "$file" "$archive/$file" || { say "$archive/$file does not match its signed index"; exit 1; }
        remember "$pkg" "$ver" "$pkg" "$rv" "$sum" "$archive" "$file" "$suite"
        say "$pkg $ver -> $rv ($suite, verified by the signed index)" ;;
      kernel) say "cannot fetch $pkg $ver; the kernel is resolved as a whole: deb-fetch.sh --kernel"; exit 1 ;;
      *) say "cannot fetch $pkg $ver (SHA-256 $sum), and its pin is exact"; exit 1 ;;
    esac
  fi
else
  # A package a pin resolved to (a newer kernel's headers, from --kernel).
  r=$(record got "$pkg" "$ver")
  [ -n "$r" ] || { say "$pkg $ver is not pinned in $lock (add it with scripts/deb-pin.sh)"; exit 1; }
  read -r _ _ _ _ sum _ file _ <<<"$r"
  use_record "$r" || { say "cannot fetch $pkg $ver (resolved; SHA-256 $sum)"; exit 1; }
fi
deb="$cache/$(basename "$file")"
mkdir -p "$root"
stamp="$root/.$(basename "$deb").unpacked"
[ -e "$stamp" ] || { dpkg-deb -x "$deb" "$root" && touch "$stamp"; }
