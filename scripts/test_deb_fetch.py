#!/usr/bin/env python3
"""Tests of the Debian fetching (scripts/debian_index.py, scripts/deb-fetch.sh) and of the skip rules
of scripts/test.sh, against real tools: a throwaway gpg key signs local archives (file:// URLs)
made of real .deb files (dpkg-deb --build), checked by the real gpgv. Nothing touches the network.
Run: python3 -m unittest scripts/test_deb_fetch.py (scripts/test.d/05-fetch.sh does)."""

from __future__ import annotations

import hashlib
import lzma
import os
import random
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import debian_index  # noqa: E402


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


class Keys:
    """Two throwaway signing keys; the keyring holds only the first (the 'archive' key)."""

    def __init__(self, root: Path):
        self.home = root / "gnupg"
        self.home.mkdir(mode=0o700)
        self.env = {**os.environ, "GNUPGHOME": str(self.home)}
        for uid in ("archive <archive@test.invalid>", "stranger <stranger@test.invalid>"):
            run(["gpg", "--batch", "--passphrase", "", "--quick-gen-key", uid, "ed25519", "sign", "never"], env=self.env)
        self.keyring = root / "keyring.gpg"
        self.keyring.write_bytes(subprocess.run(["gpg", "--export", "archive@test.invalid"], env=self.env, check=True, capture_output=True).stdout)

    def clearsign(self, text: Path, out: Path, who="archive@test.invalid"):
        run(["gpg", "--batch", "--yes", "--local-user", who, "--clearsign", "-o", str(out), str(text)], env=self.env)

    def detach(self, text: Path, out: Path, who="archive@test.invalid"):
        run(["gpg", "--batch", "--yes", "--local-user", who, "--detach-sign", "-o", str(out), str(text)], env=self.env)


class Archive:
    """A Debian-shaped archive on disk: pool/ with real .deb files, dists/SUITE/ with signed indexes."""

    def __init__(self, root: Path, keys: Keys):
        self.root, self.keys = root, keys
        self.suites: dict[tuple[str, str], list[dict]] = {}

    def url(self) -> str:
        return self.root.as_uri()

    def deb(self, suite: str, package: str, version: str, pool: str, arch="amd64", component="main") -> dict:
        """Builds a real .deb holding /usr/share/PACKAGE/version (its version) and lists it in SUITE."""
        (self.root.parent / "build").mkdir(exist_ok=True)
        build = Path(tempfile.mkdtemp(prefix=f"{package}_{version}.", dir=self.root.parent / "build"))
        (build / "DEBIAN").mkdir()
        (build / "usr/share" / package).mkdir(parents=True)
        (build / "usr/share" / package / "version").write_text(version + "\n")
        (build / "DEBIAN/control").write_text(
            f"Package: {package}\nVersion: {version}\nArchitecture: {arch}\nMaintainer: t <t@test.invalid>\nDescription: test\n"
        )
        fname = f"{pool}/{package}_{version.split(':')[-1]}_{arch}.deb"
        out = self.root / fname
        out.parent.mkdir(parents=True, exist_ok=True)
        run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(build), str(out)])
        data = out.read_bytes()
        st = {"Package": package, "Version": version, "Architecture": arch, "Filename": fname,
              "Size": str(len(data)), "SHA256": hashlib.sha256(data).hexdigest(),
              "SHA1": hashlib.sha1(data).hexdigest()}
        self.suites.setdefault((suite, component), []).append(st)
        return st

    def publish(self, suite: str, valid_until: str | None = None, inrelease=True, signer="archive@test.invalid"):
        d = self.root / "dists" / suite
        lines = []
        for (s, comp), stanzas in self.suites.items():
            if s != suite:
                continue
            text = "\n".join("".join(f"{k}: {v}\n" for k, v in st.items()) for st in stanzas)
            xz = lzma.compress(text.encode())
            p = d / comp / "binary-amd64" / "Packages.xz"
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(xz)
            lines.append(f" {hashlib.sha256(xz).hexdigest()} {len(xz)} {comp}/binary-amd64/Packages.xz")
        release = f"Suite: {suite}\nDate: Sat, 05 Dec 2026 00:00:00 UTC\n"
        if valid_until:
            release += f"Valid-Until: {valid_until}\n"
        release += "SHA256:\n" + "\n".join(lines) + "\n"
        (d / "Release").write_text(release)
        for f in ("InRelease", "Release.gpg"):
            (d / f).unlink(missing_ok=True)
        if inrelease:
            self.keys.clearsign(d / "Release", d / "InRelease", signer)
            (d / "Release").unlink()
        else:
            self.keys.detach(d / "Release", d / "Release.gpg", signer)


class Base(unittest.TestCase):
    keys: Keys

    @classmethod
    def setUpClass(cls):
        cls.keydir = tempfile.mkdtemp()
        cls.keys = Keys(Path(cls.keydir))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.keydir, ignore_errors=True)

    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp())
        self.main = Archive(self.tmp / "debian", self.keys)
        self.sec = Archive(self.tmp / "debian-security", self.keys)
        self.env = {"DEBIAN_MIRROR": self.main.url(), "DEBIAN_SECURITY_MIRROR": self.sec.url(),
                    "DEBIAN_KEYRING": str(self.keys.keyring), "DEBIAN_SNAPSHOT": (self.tmp / "nosnapshot").as_uri()}
        self.saved = {k: os.environ.get(k) for k in [*self.env, "GASAN_DEB_INDEX_CACHE"]}
        os.environ.update(self.env)
        os.environ.pop("GASAN_DEB_INDEX_CACHE", None)

    def tearDown(self):
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(self.tmp, ignore_errors=True)

    def publish_kernels(self):
        """ABI 50 (6.1.176-1) complete in bookworm; 57 (6.1.192-3) complete in security; 58 image
        without headers; a 6.12 kernel of another series, newer than all."""
        m, s = self.main, self.sec
        for p in ("linux-image-6.1.0-50-amd64", "linux-headers-6.1.0-50-amd64", "linux-headers-6.1.0-50-common", "linux-kbuild-6.1"):
            m.deb("bookworm", p, "6.1.176-1", "pool/main/l/linux", arch="all" if p.endswith("common") else "amd64")
        for p in ("linux-image-6.1.0-57-amd64", "linux-headers-6.1.0-57-amd64", "linux-headers-6.1.0-57-common", "linux-kbuild-6.1"):
            s.deb("bookworm-security", p, "6.1.192-3", "pool/updates/main/l/linux")
        s.deb("bookworm-security", "linux-image-6.1.0-58-amd64", "6.1.193-1", "pool/updates/main/l/linux")
        s.deb("bookworm-security", "linux-headers-6.1.0-58-common", "6.1.193-1", "pool/updates/main/l/linux")
        s.deb("bookworm-security", "linux-image-6.1.0-59-cloud-amd64", "6.1.194-1", "pool/updates/main/l/linux")
        for p in ("linux-image-6.12.0-1-amd64", "linux-headers-6.12.0-1-amd64", "linux-headers-6.12.0-1-common", "linux-kbuild-6.12"):
            s.deb("bookworm-security", p, "6.12.9-1", "pool/updates/main/l/linux")
        m.publish("bookworm")
        s.publish("bookworm-security")


class IndexTest(Base):
    def test_newest_version_over_the_release_and_its_security_suite_by_dpkg_rules(self):
        self.main.deb("bookworm", "libfoo1", "1.2-1", "pool/main/f/foo")
        self.main.deb("bookworm", "libfoo1", "1.2-1+deb12u1~pre", "pool/main/f/foo")
        self.main.deb("bookworm", "libbar", "9", "pool/main/b/bar")
        self.sec.deb("bookworm-security", "libfoo1", "1.2-1+deb12u1", "pool/updates/main/f/foo")
        self.main.publish("bookworm")
        self.sec.publish("bookworm-security")
        e = debian_index.resolve("bookworm", "main", "libfoo1")
        self.assertEqual((e.version, e.archive, e.suite), ("1.2-1+deb12u1", self.sec.url(), "bookworm-security"))
        self.assertEqual(e.filename, "pool/updates/main/f/foo/libfoo1_1.2-1+deb12u1_amd64.deb")
        self.assertEqual(e.sha256, hashlib.sha256((self.sec.root / e.filename).read_bytes()).hexdigest())
        # An epoch outranks everything; a tilde sorts before the empty string.
        self.main.deb("bookworm", "libfoo1", "1:0.1-1", "pool/main/f/foo")
        self.main.publish("bookworm")
        self.assertEqual(debian_index.resolve("bookworm", "main", "libfoo1").version, "1:0.1-1")
        with self.assertRaisesRegex(debian_index.DebianIndexError, "none of bookworm's suites"):
            debian_index.resolve("bookworm", "main", "libnothere")

    def test_release_and_detached_signature_work_without_inrelease(self):
        self.main.deb("bookworm", "libfoo1", "1.0-1", "pool/main/f/foo")
        self.main.publish("bookworm", inrelease=False)
        self.assertEqual(debian_index.resolve("bookworm", "main", "libfoo1").version, "1.0-1")

    def test_a_key_outside_the_keyring_is_refused(self):
        self.main.deb("bookworm", "libfoo1", "1.0-1", "pool/main/f/foo")
        for inrelease in (True, False):
            self.main.publish("bookworm", inrelease=inrelease, signer="stranger@test.invalid")
            with self.assertRaisesRegex(debian_index.DebianIndexError, "no good signature"):
                debian_index.resolve("bookworm", "main", "libfoo1")

    def test_a_release_changed_after_signing_is_refused(self):
        self.main.deb("bookworm", "libfoo1", "1.0-1", "pool/main/f/foo")
        self.main.publish("bookworm")
        p = self.main.root / "dists/bookworm/InRelease"
        p.write_text(p.read_text().replace("Suite: bookworm", "Suite: bookwarm"))
        with self.assertRaisesRegex(debian_index.DebianIndexError, "no good signature"):
            debian_index.resolve("bookworm", "main", "libfoo1")

    def test_packages_that_do_not_match_the_signed_hash_are_refused(self):
        self.main.deb("bookworm", "libfoo1", "1.0-1", "pool/main/f/foo")
        self.main.publish("bookworm")
        p = self.main.root / "dists/bookworm/main/binary-amd64/Packages.xz"
        text = lzma.decompress(p.read_bytes()).decode().replace("1.0-1", "9.0-1")
        p.write_bytes(lzma.compress(text.encode()))
        with self.assertRaisesRegex(debian_index.DebianIndexError, "the signed Release says"):
            debian_index.resolve("bookworm", "main", "libfoo1")

    def test_an_expired_release_is_refused(self):
        self.main.deb("bookworm", "libfoo1", "1.0-1", "pool/main/f/foo")
        self.main.publish("bookworm", valid_until="Mon, 01 Jan 2024 00:00:00 UTC")
        with self.assertRaisesRegex(debian_index.DebianIndexError, "expired"):
            debian_index.resolve("bookworm", "main", "libfoo1")
        self.main.publish("bookworm", valid_until="Fri, 01 Jan 2100 00:00:00 UTC")
        self.assertEqual(debian_index.resolve("bookworm", "main", "libfoo1").version, "1.0-1")

    def test_a_missing_keyring_is_named(self):
        os.environ["DEBIAN_KEYRING"] = str(self.tmp / "none.gpg")
        self.main.deb("bookworm", "libfoo1", "1.0-1", "pool/main/f/foo")
        self.main.publish("bookworm")
        with self.assertRaisesRegex(debian_index.DebianIndexError, "no Debian archive keyring at .*none.gpg"):
            debian_index.resolve("bookworm", "main", "libfoo1")

    def test_kernel_is_the_newest_complete_one_of_its_series(self):
        self.publish_kernels()
        got = debian_index.kernel("bookworm", "6.1.0", "amd64")
        self.assertEqual([(e.package, e.version) for e in got], [
            ("linux-image-6.1.0-57-amd64", "6.1.192-3"), ("linux-headers-6.1.0-57-amd64", "6.1.192-3"),
            ("linux-headers-6.1.0-57-common", "6.1.192-3"), ("linux-kbuild-6.1", "6.1.192-3")])
        with self.assertRaisesRegex(debian_index.DebianIndexError, "no 6.2.0-\\*-amd64 kernel"):
            debian_index.kernel("bookworm", "6.2.0", "amd64")
        with self.assertRaisesRegex(debian_index.DebianIndexError, "bad kernel series"):
            debian_index.kernel("bookworm", "6.1.*", "amd64")


    def test_kernel_choice_over_random_archives_is_the_newest_complete_abi(self):
        # Property: whatever subset of each ABI's four packages the two archives hold, the choice
        # is the highest ABI (versions grow with it) whose four packages are all there, or none.
        members = ("linux-image-6.1.0-{}-amd64", "linux-headers-6.1.0-{}-amd64", "linux-headers-6.1.0-{}-common", "linux-kbuild-6.1")
        for seed in range(6):
            rng = random.Random(seed)
            self.main.suites.clear()
            self.sec.suites.clear()
            complete = []
            for abi in rng.sample(range(40, 60), 4):
                version = f"6.1.{100 + abi}-1"
                present = [rng.random() < 0.75 for _ in members]
                for name, here in zip(members, present):
                    if here:
                        archive, suite, pool = rng.choice([(self.main, "bookworm", "pool/main/l/linux"), (self.sec, "bookworm-security", "pool/updates/main/l/linux")])
                        archive.deb(suite, name.format(abi), version, f"{pool}/{seed}")
                if all(present):
                    complete.append(abi)
            self.main.publish("bookworm")
            self.sec.publish("bookworm-security")
            if complete:
                got = debian_index.kernel("bookworm", "6.1.0", "amd64")
                want = max(complete)
                self.assertEqual([(e.package, e.version) for e in got], [(m.format(want), f"6.1.{100 + want}-1") for m in members], f"seed {seed}")
            else:
                with self.assertRaisesRegex(debian_index.DebianIndexError, "no 6.1.0-\\*-amd64 kernel"):
                    debian_index.kernel("bookworm", "6.1.0", "amd64")


class DebFetchTest(Base):
    """scripts/deb-fetch.sh end to end, with a lock file of its own."""

    def setUp(self):
        super().setUp()
        self.cache = self.tmp / "cache"
        self.lock = self.tmp / "debs.lock"
        self.lines = []

    def pin(self, st: dict, dist="bookworm", policy="newest"):
        self.lines.append(f"{st['Package']} {st['Version']} {st['SHA256']} {st['SHA1']} {st['Filename']} {dist} {policy}\n")
        self.lock.write_text("# test pins\n" + "".join(self.lines))

    def fetch(self, *args, ok=True):
        env = {**os.environ, "GASAN_DEB_CACHE": str(self.cache), "GASAN_DEBS_LOCK": str(self.lock)}
        r = subprocess.run(["bash", str(HERE / "deb-fetch.sh"), *map(str, args)], env=env, capture_output=True, text=True)
        self.assertEqual(r.returncode == 0, ok, f"deb-fetch.sh {args}: rc {r.returncode}\n{r.stdout}\n{r.stderr}")
        return r

    def offline(self):
        """Both archives gone: what still works comes from the cache."""
        for d in (self.main.root, self.sec.root):
            shutil.rmtree(d)

    def test_pinned_file_comes_from_the_archive_its_pool_path_names(self):
        st = self.sec.deb("bookworm-security", "libssl3", "3.0.22-1~deb12u2", "pool/updates/main/o/openssl")
        self.pin(st)
        r = self.fetch("libssl3", "3.0.22-1~deb12u2", self.tmp / "root")
        self.assertIn(f"from {self.sec.url()}/pool/updates/main/o/openssl/", r.stderr)
        self.assertEqual((self.tmp / "root/usr/share/libssl3/version").read_text(), "3.0.22-1~deb12u2\n")

    def test_a_gone_pin_resolves_from_the_signed_index_and_is_kept(self):
        old = self.main.deb("bookworm", "libpng16-16", "1.6.39-2+deb12u5", "pool/main/libp/libpng1.6")
        self.main.suites.clear()
        (self.main.root / old["Filename"]).unlink()  # a point release dropped it
        self.main.deb("bookworm", "libpng16-16", "1.6.39-2+deb12u6", "pool/main/libp/libpng1.6")
        self.sec.deb("bookworm-security", "libpng16-16", "1.6.39-2+deb12u7", "pool/updates/main/libp/libpng1.6")
        self.main.publish("bookworm")
        self.sec.publish("bookworm-security")
        self.pin(old)
        r = self.fetch("libpng16-16", "1.6.39-2+deb12u5", self.tmp / "root")
        self.assertIn("libpng16-16 1.6.39-2+deb12u5 -> 1.6.39-2+deb12u7 (bookworm-security, verified by the signed index)", r.stderr)
        self.assertEqual((self.tmp / "root/usr/share/libpng16-16/version").read_text(), "1.6.39-2+deb12u7\n")
        rec = (self.cache / "resolved-versions").read_text().split()
        self.assertEqual(rec[:4], ["libpng16-16", "1.6.39-2+deb12u5", "libpng16-16", "1.6.39-2+deb12u7"])
        # Offline, into a fresh root: the recorded resolution and the cached file suffice.
        self.offline()
        r = self.fetch("libpng16-16", "1.6.39-2+deb12u5", self.tmp / "root2")
        self.assertIn("using 1.6.39-2+deb12u7 from bookworm-security (resolved", r.stderr)
        self.assertEqual((self.tmp / "root2/usr/share/libpng16-16/version").read_text(), "1.6.39-2+deb12u7\n")

    def test_a_resolved_file_that_does_not_match_its_index_is_refused(self):
        old = self.main.deb("bookworm", "libfoo1", "1.0-1", "pool/main/f/foo")
        (self.main.root / old["Filename"]).unlink()
        self.main.suites.clear()
        new = self.main.deb("bookworm", "libfoo1", "1.0-2", "pool/main/f/foo")
        self.main.publish("bookworm")
        self.pin(old)
        deb = self.main.root / new["Filename"]
        deb.write_bytes(deb.read_bytes() + b"tampered")
        r = self.fetch("libfoo1", "1.0-1", self.tmp / "root", ok=False)
        self.assertIn("does not match its signed index", r.stderr)
        self.assertFalse((self.tmp / "root/usr/share/libfoo1").exists())
        self.assertFalse((self.cache / "resolved-versions").exists())

    def test_an_exact_pin_that_is_gone_fails_and_names_it(self):
        old = self.main.deb("trixie", "nvidia-open-kernel-source", "550.163.01-2", "pool/contrib/n/nvidia")
        (self.main.root / old["Filename"]).unlink()
        self.main.deb("trixie", "nvidia-open-kernel-source", "550.200.01-1", "pool/contrib/n/nvidia")
        self.main.publish("trixie")
        self.pin(old, dist="trixie", policy="exact")
        r = self.fetch("nvidia-open-kernel-source", "550.163.01-2", self.tmp / "root", ok=False)
        self.assertIn("its pin is exact", r.stderr)

    def test_unpinned_packages_and_bad_arguments_are_refused(self):
        self.lock.write_text("# nothing pinned\n")
        r = self.fetch("libfoo1", "1.0-1", self.tmp / "root", ok=False)
        self.assertIn("libfoo1 1.0-1 is not pinned", r.stderr)
        r = self.fetch("--kernels", ok=False)
        self.assertIn("usage: deb-fetch.sh", r.stderr)

    def test_a_gone_kernel_resolves_as_a_whole_within_its_series(self):
        self.publish_kernels()
        for p in ("linux-image-6.1.0-50-amd64", "linux-headers-6.1.0-50-amd64", "linux-headers-6.1.0-50-common", "linux-kbuild-6.1"):
            st = next(s for s in self.main.suites[("bookworm", "main")] if s["Package"] == p)
            self.pin(st, policy="kernel")
        # While Debian has the pinned kernel, it is the one.
        self.assertEqual(self.fetch("--kernel").stdout, "6.1.0-50 6.1.176-1\n")
        shutil.rmtree(self.cache)
        for st in self.main.suites[("bookworm", "main")]:
            (self.main.root / st["Filename"]).unlink()
        self.main.suites.clear()
        self.main.publish("bookworm")
        r = self.fetch("--kernel")
        self.assertEqual(r.stdout, "6.1.0-57 6.1.192-3\n")
        self.assertIn("kernel: linux-headers-6.1.0-50-common 6.1.176-1 -> linux-headers-6.1.0-57-common 6.1.192-3", r.stderr)
        # The resolved members are fetched by their own names; a pinned member alone is refused.
        self.fetch("linux-headers-6.1.0-57-amd64", "6.1.192-3", self.tmp / "root")
        self.assertEqual((self.tmp / "root/usr/share/linux-headers-6.1.0-57-amd64/version").read_text(), "6.1.192-3\n")
        r = self.fetch("linux-image-6.1.0-50-amd64", "6.1.176-1", self.tmp / "vm", ok=False)
        self.assertIn("the kernel is resolved as a whole", r.stderr)
        # Offline: the same answer from the cache.
        self.offline()
        self.assertEqual(self.fetch("--kernel").stdout, "6.1.0-57 6.1.192-3\n")
        self.fetch("linux-image-6.1.0-57-amd64", "6.1.192-3", self.tmp / "vm")


class SkipRulesTest(unittest.TestCase):
    """scripts/test.sh's summary: GPU skips pass; any other skip fails under CI=true."""

    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp())
        (self.tmp / "scripts/test.d").mkdir(parents=True)
        shutil.copy(HERE / "test.sh", self.tmp / "scripts/test.sh")
        cuda = self.tmp / "cuda/bin"
        cuda.mkdir(parents=True)
        (cuda / "nvcc").write_text("#!/bin/sh\necho 'Build cuda_13.0'\n")
        (self.tmp / "scripts/cuda-toolchain.sh").write_text(f"#!/bin/sh\necho {self.tmp / 'cuda'}\n")
        for f in (cuda / "nvcc", self.tmp / "scripts/cuda-toolchain.sh"):
            f.chmod(0o755)

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def step(self, name: str, body: str):
        (self.tmp / "scripts/test.d" / name).write_text(f"#!/bin/bash\n{body}\n")

    def run_tests(self, ci: str | None):
        env = {k: v for k, v in os.environ.items() if k != "CI"}
        if ci is not None:
            env["CI"] = ci
        return subprocess.run(["bash", str(self.tmp / "scripts/test.sh")], env=env, capture_output=True, text=True)

    def test_gpu_skips_pass_under_ci(self):
        self.step("10-a.sh", "echo 'SKIPPED: GPU tests: no NVIDIA GPU on this machine (no /dev/nvidia0)'")
        r = self.run_tests("true")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("SKIPPED, no GPU (1;", r.stdout)
        self.assertIn("skipped: 1 for want of a GPU, 0 other", r.stdout)

    def test_other_skips_fail_under_ci_and_are_listed_apart_elsewhere(self):
        self.step("10-a.sh", "echo 'SKIPPED: GPU tests: no NVIDIA GPU on this machine'")
        self.step("20-b.sh", "echo 'SKIPPED: kernel patch in a VM: no qemu-system-x86_64 here'")
        r = self.run_tests("true")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("SKIPPED, not for want of a GPU (1;", r.stdout)
        self.assertIn("20-b.sh: kernel patch in a VM", r.stdout)
        self.assertIn("1 skip(s) not for want of a GPU under CI=true", r.stderr)
        r = self.run_tests(None)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("skipped: 1 for want of a GPU, 1 other", r.stdout)

    def test_a_failing_step_fails_the_run(self):
        self.step("10-a.sh", "echo fetch failed >&2; exit 1")
        r = self.run_tests(None)
        self.assertEqual(r.returncode, 1)
        self.assertIn("gasan tests FAILED: 10-a.sh", r.stderr)


if __name__ == "__main__":
    unittest.main()
