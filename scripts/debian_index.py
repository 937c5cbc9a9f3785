#!/usr/bin/env python3
"""Finds Debian packages in Debian's signed indexes, for scripts/deb-fetch.sh and scripts/deb-pin.sh.

The chain of trust, checked link by link (nothing is used before its link is checked):
  1. a suite's InRelease (or Release + Release.gpg) carries a good signature by a key of the
     Debian archive keyring (gpgv), and its Valid-Until, if any, has not passed; only the signed
     text is read;
  2. the component's Packages.xz has the SHA-256 that the signed Release lists;
  3. the .deb a Packages stanza names is then checked by the caller against that stanza's SHA256.

A release DIST (e.g. bookworm) is looked up in three suites: DIST and DIST-updates in the main
archive, DIST-security in the security archive (whose pool paths start with pool/updates/). The
newest version over the three wins, compared by `dpkg --compare-versions` (dpkg's own rules).

Commands (one line per package on stdout: PACKAGE VERSION SHA256 ARCHIVE-URL POOL-PATH SUITE):
  resolve DIST COMPONENT PACKAGE        the newest version of PACKAGE
  exact   DIST COMPONENT PACKAGE VERSION that version (for scripts/deb-pin.sh)
  kernel  DIST ABI-SERIES FLAVOUR        the newest kernel of one ABI series (e.g. 6.1.0, amd64)
                                         for which the image, both header packages and kbuild all
                                         exist at the same version: linux-image-<S>-<N>-<F>,
                                         linux-headers-<S>-<N>-<F>, linux-headers-<S>-<N>-common,
                                         linux-kbuild-<major.minor of S>
Env: DEBIAN_MIRROR (default http://deb.debian.org/debian), DEBIAN_SECURITY_MIRROR (default
http://deb.debian.org/debian-security), DEBIAN_KEYRING (default
/usr/share/keyrings/debian-archive-keyring.gpg), GASAN_DEB_INDEX_CACHE (verified Packages files are
kept there by their SHA-256; default: none kept).
Errors go to stderr with exit status 1; a bad command line exits 2."""

from __future__ import annotations

import email.utils
import functools
import hashlib
import lzma
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ARCH = "amd64"


class DebianIndexError(Exception):
    """A link of the chain that does not hold, or a package the indexes do not have."""


@dataclass(frozen=True)
class Entry:
    package: str
    version: str
    sha256: str
    archive: str
    filename: str
    suite: str

    def line(self) -> str:
        return f"{self.package} {self.version} {self.sha256} {self.archive} {self.filename} {self.suite}"


def mirrors() -> tuple[str, str]:
    main = os.environ.get("DEBIAN_MIRROR", "http://deb.debian.org/debian").rstrip("/")
    security = os.environ.get("DEBIAN_SECURITY_MIRROR", "http://deb.debian.org/debian-security").rstrip("/")
    return main, security


def suites(dist: str) -> list[tuple[str, str]]:
    """(archive URL, suite) pairs in which release DIST's packages live."""
    main, security = mirrors()
    return [(main, dist), (main, f"{dist}-updates"), (security, f"{dist}-security")]


def fetch(url: str) -> bytes | None:
    """The body at URL, or None when it is not there (HTTP 404/410, missing file)."""
    try:
        with urllib.request.urlopen(url, timeout=60) as r:
            return r.read()
    except urllib.error.HTTPError as e:
        if e.code in (404, 410):
            return None
        raise DebianIndexError(f"{url}: HTTP {e.code}") from e
    except urllib.error.URLError as e:
        if isinstance(e.reason, FileNotFoundError):
            return None
        raise DebianIndexError(f"{url}: {e.reason}") from e


def keyring() -> str:
    path = os.environ.get("DEBIAN_KEYRING", "/usr/share/keyrings/debian-archive-keyring.gpg")
    if not os.access(path, os.R_OK):
        raise DebianIndexError(f"no Debian archive keyring at {path} (set DEBIAN_KEYRING)")
    return path


def gpgv(signed: bytes, signature: bytes | None) -> bytes:
    """The text that a good signature by a keyring key covers. signature None: SIGNED is clearsigned."""
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        (t / "signed").write_bytes(signed)
        cmd = ["gpgv", "--status-fd", "1", "--keyring", keyring()]
        if signature is None:
            cmd += ["--output", str(t / "text"), str(t / "signed")]
        else:
            (t / "signature").write_bytes(signature)
            cmd += [str(t / "signature"), str(t / "signed")]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True)
        except FileNotFoundError as e:
            raise DebianIndexError("no gpgv here (Debian: apt install gpgv)") from e
        status = [l.split()[1] for l in r.stdout.splitlines() if l.startswith("[GNUPG:] ") and len(l.split()) > 1]
        # GOODSIG: a good signature by a key that is neither expired nor revoked. A signature by a
        # key this keyring lacks (ERRSIG) is tolerated as long as another one is good, as apt does.
        if "BADSIG" in status or "GOODSIG" not in status:
            raise DebianIndexError(f"no good signature by a key of {keyring()}: {r.stderr.strip()[-300:]}")
        return (t / "text").read_bytes() if signature is None else signed


def parse_fields(text: str) -> dict[str, str]:
    """One deb822 paragraph: field name to value (continuation lines joined with newlines)."""
    fields: dict[str, str] = {}
    key = None
    for line in text.splitlines():
        if line.startswith((" ", "\t")) and key is not None:
            fields[key] += "\n" + line.strip()
        elif ":" in line:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return fields


def release(archive: str, suite: str) -> dict[str, str] | None:
    """The signed Release fields of SUITE, or None when the archive has no such suite."""
    base = f"{archive}/dists/{suite}"
    inrelease = fetch(f"{base}/InRelease")
    if inrelease is not None:
        text = gpgv(inrelease, None)
    else:
        plain = fetch(f"{base}/Release")
        if plain is None:
            return None
        sig = fetch(f"{base}/Release.gpg")
        if sig is None:
            raise DebianIndexError(f"{base}: Release without Release.gpg")
        text = gpgv(plain, sig)
    fields = parse_fields(text.decode("utf-8", "replace"))
    until = fields.get("Valid-Until")
    if until and email.utils.parsedate_to_datetime(until).timestamp() < time.time():
        raise DebianIndexError(f"{base}: the signed Release expired on {until} (a stale or replayed index)")
    return fields


def packages(archive: str, suite: str, component: str) -> str | None:
    """The verified Packages text of one suite's component, or None when the suite or component is absent."""
    rel = release(archive, suite)
    if rel is None:
        return None
    path = f"{component}/binary-{ARCH}/Packages.xz"
    want = None
    for line in rel.get("SHA256", "").splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[2] == path:
            want = parts[0]
    if want is None:
        return None
    cache = os.environ.get("GASAN_DEB_INDEX_CACHE")
    kept = Path(cache) / f"{want}.Packages" if cache else None
    if kept is not None and kept.is_file():
        return kept.read_text()
    data = fetch(f"{archive}/dists/{suite}/{path}")
    if data is None:
        raise DebianIndexError(f"{archive}/dists/{suite}/{path}: listed in the signed Release but absent")
    got = hashlib.sha256(data).hexdigest()
    if got != want:
        raise DebianIndexError(f"{archive}/dists/{suite}/{path}: SHA-256 {got}, the signed Release says {want}")
    text = lzma.decompress(data).decode("utf-8", "replace")
    if kept is not None:
        kept.parent.mkdir(parents=True, exist_ok=True)
        tmp = kept.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(text)
        tmp.replace(kept)
    return text


def stanzas(text: str):
    for para in text.split("\n\n"):
        if para.strip():
            yield parse_fields(para)


def compare_versions(a: str, b: str) -> int:
    if a == b:
        return 0
    try:
        r = subprocess.run(["dpkg", "--compare-versions", a, "lt", b])
    except FileNotFoundError as e:
        raise DebianIndexError("no dpkg here to compare Debian versions") from e
    return -1 if r.returncode == 0 else 1


def entries(dist: str, component: str, wanted) -> list[Entry]:
    """Every amd64 or all package of DIST's three suites whose name WANTED accepts."""
    found = []
    for archive, suite in suites(dist):
        text = packages(archive, suite, component)
        if text is None:
            continue
        for s in stanzas(text):
            name = s.get("Package", "")
            if wanted(name) and s.get("Architecture") in (ARCH, "all"):
                if not (s.get("Version") and s.get("SHA256") and s.get("Filename")):
                    raise DebianIndexError(f"{archive} {suite}: stanza of {name} lacks Version, SHA256 or Filename")
                found.append(Entry(name, s["Version"], s["SHA256"], archive, s["Filename"], suite))
    return found


def newest(found: list[Entry]) -> Entry:
    return max(found, key=functools.cmp_to_key(lambda a, b: compare_versions(a.version, b.version)))


def resolve(dist: str, component: str, package: str) -> Entry:
    found = entries(dist, component, lambda n: n == package)
    if not found:
        raise DebianIndexError(f"{package} is in none of {dist}'s suites ({component})")
    return newest(found)


def exact(dist: str, component: str, package: str, version: str) -> Entry:
    found = [e for e in entries(dist, component, lambda n: n == package) if e.version == version]
    if not found:
        raise DebianIndexError(f"{package} {version} is in none of {dist}'s suites today ({component})")
    return found[0]


def kernel(dist: str, series: str, flavour: str) -> list[Entry]:
    """Image, headers, common headers and kbuild of the newest complete kernel of SERIES.

    SERIES is the ABI prefix without its number (6.1.0 for linux-image-6.1.0-57-amd64): the
    kernel never leaves it, so headers, modules and image keep one upstream series."""
    if not re.fullmatch(r"\d+\.\d+\.\d+", series) or not re.fullmatch(r"[a-z0-9-]+", flavour):
        raise DebianIndexError(f"bad kernel series {series!r} or flavour {flavour!r}")
    major_minor = series.rsplit(".", 1)[0]
    pat = re.compile(rf"linux-(image|headers)-{re.escape(series)}-(\d+)-({re.escape(flavour)}|common)")
    kbuild = f"linux-kbuild-{major_minor}"
    found = entries(dist, "main", lambda n: n == kbuild or bool(pat.fullmatch(n)))
    by_name_version = {(e.package, e.version): e for e in found}
    complete = []
    for e in found:
        m = pat.fullmatch(e.package)
        if not m or m.group(1) != "image" or m.group(3) != flavour:
            continue
        abi = m.group(2)
        members = [
            e,
            by_name_version.get((f"linux-headers-{series}-{abi}-{flavour}", e.version)),
            by_name_version.get((f"linux-headers-{series}-{abi}-common", e.version)),
            by_name_version.get((kbuild, e.version)),
        ]
        if all(members):
            complete.append(members)
    if not complete:
        raise DebianIndexError(f"no {series}-*-{flavour} kernel of {dist} has its image, headers and {kbuild} at one version")
    best = newest([m[0] for m in complete])
    return next(m for m in complete if m[0] is best)


USAGE = """usage: debian_index.py resolve DIST COMPONENT PACKAGE
       debian_index.py exact DIST COMPONENT PACKAGE VERSION
       debian_index.py kernel DIST ABI-SERIES FLAVOUR"""


def main(argv: list[str]) -> int:
    commands = {"resolve": (3, resolve), "exact": (4, exact), "kernel": (3, kernel)}
    if len(argv) < 1 or argv[0] not in commands or len(argv) - 1 != commands[argv[0]][0]:
        print(USAGE, file=sys.stderr)
        return 2
    try:
        result = commands[argv[0]][1](*argv[1:])
    except DebianIndexError as e:
        print(f"debian_index.py: {e}", file=sys.stderr)
        return 1
    for e in result if isinstance(result, list) else [result]:
        print(e.line())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
