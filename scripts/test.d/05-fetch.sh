#!/usr/bin/env bash
# The Debian fetching's own tests (scripts/test_deb_fetch.py), no network: signed-index resolution
# against local archives signed with a throwaway gpg key (real gpgv, real .deb files), deb-fetch.sh
# end to end (pins from the security archive, gone pins resolved and kept, the kernel as a whole,
# tampered files refused) and scripts/test.sh's skip rules under CI=true.
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 -m unittest -v scripts/test_deb_fetch.py 2>&1
