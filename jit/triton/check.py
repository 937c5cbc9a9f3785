"""Checks Triton's ahead-of-time compiles through gasan-ptxas (scripts/test.d/25-triton.sh).

For every kernel compiled both natively (NATIVE_DIR) and through the front end (CHECKED_DIR), by
jit/triton/kernels.py:
* the checked cubin carries gasan's marker (`__gasan_jit`: magic, format 2, this REVISION) and its
  tables (`__gasan_jit_tables`: parameter tags and site table, LZ4), the native one neither;
* a loop-free kernel with parameter bounds takes every one from the launch (its pointers listed
  in the cubin's tag table, none looked up in the extent table at its entry); a kernel with a loop
  looks its pointers up and lists none (jit/FORMS.md item 6);
* the site table has one global site per check that `gasan-ptx stats` counts on Triton's PTX, and
  its sites name the kernel's Python file;
* every predicated global access in the checked PTX (`gasan-ptx instrument` of Triton's PTX, the
  same options: `@%p ld.global ...`, atomics, stores, `cp.async` with a source size) is checked
  under its own predicate: the check block right before it reads that predicate (or source-size
  register), so a masked-off lane is never reported; an access of a run of masked accesses runs
  under its check's verdict `@%gsgN` instead, which that block sets from the guard the access has
  in Triton's PTX.

* ptxas (PTXAS) does not serialize the checked kernel's `wgmma` (C7518) where it does not
  serialize the native one's (jit/FORMS.md item 2 and item 8).

It writes the census of Triton's access forms, with what the rewriter does with each (checked,
skipped with `stats`'s reason), as Markdown to FORMS_OUT.

Usage: python3 check.py NATIVE_DIR CHECKED_DIR GASAN_PTX REVISION FORMS_OUT PTXAS
"""

import collections
import glob
import json
import os
import re
import struct
import subprocess
import sys

MARKER = b"__gasan_jit"
TABLES = b"__gasan_jit_tables"


def lz4_block(src):
    """An LZ4 block with its uncompressed size in front (lz4_flex::compress_prepend_size)."""
    size, = struct.unpack_from("<I", src, 0)
    dst, i = bytearray(), 4

    def length(n):
        nonlocal i
        if n == 15:
            while True:
                b = src[i]
                i += 1
                n += b
                if b != 255:
                    break
        return n

    while i < len(src):
        token = src[i]
        i += 1
        lit = length(token >> 4)
        dst += src[i:i + lit]
        i += lit
        if i >= len(src):
            break
        offset = src[i] | src[i + 1] << 8
        i += 2
        start = len(dst) - offset
        for k in range(length(token & 15) + 4):
            dst.append(dst[start + k])
    assert len(dst) == size, f"LZ4 block: {len(dst)} bytes, its header says {size}"
    return bytes(dst)


def tables(path):
    """(parameter tags text, site table) a cubin carries, or None."""
    b = elf_symbol_bytes(path, TABLES)
    if b is None:
        return None
    raw = lz4_block(b)
    n, = struct.unpack_from("<I", raw, 0)
    return raw[4:4 + n].decode(), json.loads(raw[4 + n:])


def has_loop(body):
    """Whether a kernel body branches back to a label above the branch."""
    labels = {m.group(1): m.start() for m in re.finditer(r"^\s*([$\w]+):", body, re.M)}
    return any(labels.get(m.group(1), m.start()) < m.start() for m in re.finditer(r"\bbra(?:\.uni)?\s+([$\w]+)\s*;", body))


def tag_failures(name, tags_text, checked_ptx):
    """A loop-free kernel whose entry finds its parameters' blocks must take every one from the
    launch: Triton declares its pointers `.ptr .global .align N`, and each must be listed in the
    tag table the cubin carries (the runtime tags those arguments) and decoded at the entry, none
    looked up in the extent table (a dependent load before the first access). A kernel with a
    loop must look them up and list none: untagged pointers cost its loop uniform-register moves
    in every iteration."""
    tagged = {}
    for line in tags_text.splitlines():
        words = line.split()
        if words:
            tagged[words[0]] = [int(w) for w in words[2:]]
    out = []
    for m in re.finditer(r"\.entry\s+(\w+)\s*\(", checked_ptx):
        kernel = m.group(1)
        body = checked_ptx[m.end():]
        nxt = re.search(r"\.entry\s+\w+\s*\(", body)
        body = body[: nxt.start()] if nxt else body
        if "%gsbl" not in body:
            continue  # no parameter bounds in this kernel
        lookups = body.count("ld.global.nc.v2.u64 {%gsbl")
        if has_loop(body):
            if tagged.get(kernel):
                out.append(f"{name}: {kernel} has a loop but lists tagged parameters {tagged[kernel]} ({tags_text!r})")
            if not lookups:
                out.append(f"{name}: {kernel} has a loop and parameter bounds but looks no parameter block up")
            continue
        if lookups:
            out.append(f"{name}: {kernel} looks {lookups} parameter block(s) up in the extent table instead of taking them from the launch")
        if not tagged.get(kernel):
            out.append(f"{name}: {kernel} has parameter bounds but no tagged parameter in the cubin's tag table ({tags_text!r})")
    return out


def elf_symbol_bytes(path, name):
    """The bytes of ELF symbol `name` (64-bit little-endian ELF), or None when it has no such symbol."""
    data = open(path, "rb").read()
    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1, f"{path}: not a 64-bit little-endian ELF"
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    for sh in sections:
        if sh[1] != 2:  # SHT_SYMTAB
            continue
        strtab = sections[sh[6]]
        for off in range(sh[4], sh[4] + sh[5], sh[9]):
            st_name, _info, _other, shndx, value, size = struct.unpack_from("<IBBHQQ", data, off)
            end = data.index(b"\0", strtab[4] + st_name)
            if data[strtab[4] + st_name:end] == name:
                sec = sections[shndx]
                return data[sec[4] + value:sec[4] + value + size]
    return None


def marker(path):
    b = elf_symbol_bytes(path, MARKER)
    if b is None:
        return None
    assert len(b) == 56, f"{path}: marker of {len(b)} bytes"
    assert b[:8] == b"GASANJIT", f"{path}: marker magic {b[:8]!r}"
    fmt, rev = struct.unpack_from("<II", b, 8)
    options, = struct.unpack_from("<Q", b, 16)
    return {"format": fmt, "revision": rev, "options": options, "key": b[24:56].hex()}


def stats(gasan_ptx, ptx):
    """`gasan-ptx stats` TOTAL: found, checked, eliminated, unknown, skipped {reason: n}, unknown opcodes."""
    out = subprocess.run([gasan_ptx, "stats", ptx], check=True, capture_output=True, text=True).stdout
    lines = out.splitlines()
    # Columns by the header's names (function, counts..., skipped), so added count columns don't shift the rest.
    header = next(l for l in lines if l.startswith("function")).split()
    counts = header[1:header.index("skipped")]
    parts = next(l for l in lines if l.startswith("TOTAL")).split()
    total = dict(zip(counts, map(int, parts[1:1 + len(counts)])))
    skipped = dict(kv.split("=") for kv in parts[1 + len(counts):])
    unknown_ops = dict(re.findall(r"^unknown opcode (\S+): (\d+)$", out, re.M))
    return {"found": total["found"], "checked": total["checked"], "eliminated": total["eliminated"], "unknown": total["unknown"],
            "copy_checked": total["copy-chk"],
            "skipped": {k: int(v) for k, v in skipped.items()}, "unknown_opcodes": unknown_ops}


GUARDED = re.compile(r"^\s*@(!?)(%p\d+)\s+((?:ld|st|atom|red)\.global\S*|cp\.async(?!\.bulk)\S*)")
CP_ASYNC_SIZE = re.compile(r"^\s*(?:@!?%p\d+\s+)?cp\.async\.c[ag]\.shared\S*\.global\s+\[[^\]]*\],\s*\[[^\]]*\],\s*[^,;]+,\s*(%r\d+)\s*;")
# An access of a run of masked accesses (instrument/src/ptx/masked_runs.rs) runs under its check's
# verdict `%gsgN` (its mask and not bad), which the check block right before it sets from a copy
# of the access's own mask.
RUN_MEMBER = re.compile(r"^\s*@(%gsg\d+)\s+((?:ld|st|atom|red)\.global[^;]*;)")
GLOBAL_ACCESS = re.compile(r"^\s*(?:@(!?%p\d+)\s+)?((?:ld|st|atom|red)\.global[^;]*;)")


# Loop versioning (instrument/src/ptx/loops.rs): a range test whose failure branches to the
# original loop's label, then the fast copy from `$gasan_loopN:` to `bra $gasan_loopN_done;`.
RANGE_TEST_EXIT = re.compile(r"^\s*@!%gsh\d+_\d+ bra(?:\.uni)? (\$\w+); //gasan")
FAST_COPY_START = re.compile(r"^\$gasan_loop(\d+): //gasan")
FAST_COPY_END = re.compile(r"^\s*bra \$gasan_loop\d+_done; //gasan")


def loop_accesses(original_lines, label):
    """The global accesses (guard, statement) of the original loop at `label`: from its label to its
    back edge."""
    start = next(i for i, l in enumerate(original_lines) if l.startswith(label + ":"))
    out = []
    for line in original_lines[start + 1:]:
        m = GLOBAL_ACCESS.match(line)
        if m:
            out.append(m.groups())
        if re.search(r"\bbra(\.uni)?\s+" + re.escape(label) + r"\s*;", line):
            return out
    raise ValueError(f"no back edge to {label}")


def predicate_scan(checked_ptx, original_ptx):
    """Guarded accesses whose check block does not read their guard: [(line, text)]; how many were
    seen; and how many guarded accesses of fast loop copies go unchecked, covered by their loop's
    range test.

    A run member's guard is the one its statement has in the original PTX (the accesses keep their
    order and text): its check must copy that guard and set the verdict it runs under from it. A fast
    copy repeats its loop's accesses (loads may move up in it): each must be one of the loop's, and
    one without a check of its own must be in a copy that only a passed range test enters."""
    lines = open(checked_ptx).read().split("\n")
    original_lines = open(original_ptx).read().split("\n")
    original = [m.groups() for m in map(GLOBAL_ACCESS.match, original_lines) if m]
    bad, seen, range_tested, k = [], 0, 0, 0
    # In a fast copy: the loop's accesses not yet matched; else None.
    copy, tested_loop = None, None
    for i, line in enumerate(lines):
        t = RANGE_TEST_EXIT.match(line)
        if t:
            tested_loop = t.group(1)
            continue
        if FAST_COPY_START.match(line):
            if tested_loop is None:
                bad.append((i + 1, "a fast loop copy with no range test before it"))
                copy = []
            else:
                copy = loop_accesses(original_lines, tested_loop)
            continue
        if FAST_COPY_END.match(line):
            copy, tested_loop = None, None
            continue
        m = GUARDED.match(line)
        c = CP_ASYNC_SIZE.match(line)
        r = RUN_MEMBER.match(line)
        g = GLOBAL_ACCESS.match(line) if not r and not line.rstrip().endswith("//gasan") else None
        guard = m.group(2) if m else (c.group(1) if c else None)
        if r or g:
            stmt = (r or g).group(2)
            if copy is not None:
                j = next((j for j, a in enumerate(copy) if a[1] == stmt), None)
                if j is None:
                    bad.append((i + 1, "not an access of its loop: " + line.strip()))
                    continue
                original_guard = copy.pop(j)[0]
            else:
                while k < len(original) and original[k][1] != stmt:
                    k += 1
                if k == len(original):
                    bad.append((i + 1, "not an access of the original PTX, in order: " + line.strip()))
                    continue
                original_guard = original[k][0]
                k += 1
            if r:
                if original_guard is None:
                    bad.append((i + 1, "a run member whose access had no guard: " + line.strip()))
                    continue
                guard = original_guard.lstrip("!")
        if guard is None:
            continue
        seen += 1
        j, block = i - 1, []
        while j >= 0 and lines[j].rstrip().endswith("//gasan"):
            block.append(lines[j])
            j -= 1
        if not any(re.search(re.escape(guard) + r"\b", b) for b in block):
            if copy is not None and not r:
                range_tested += 1
            else:
                bad.append((i + 1, line.strip()))
        elif r and not any(
            re.search(r"and\.pred " + re.escape(r.group(1)) + r", %gsp0, %gsp2;", b)
            # A member of a run tested before it: its mask bit clear and its guard as written.
            or re.search(r"setp\.eq\.and\.u32 " + re.escape(r.group(1)) + r", %gsr0, 0, " + re.escape(original_guard) + ";", b)
            for b in block
        ):
            bad.append((i + 1, "its verdict is not set from its guard: " + line.strip()))
    return bad, seen, range_tested


# Access forms of Triton's PTX, by the first word of the statement (guard dropped).
FORMS = [
    ("ld.global (scalar)", r"ld\.global(?!\S*\.v\d)"),
    ("ld.global.v2/v4 (vector)", r"ld\.global\S*\.v\d"),
    ("st.global (scalar)", r"st\.global(?!\S*\.v\d)"),
    ("st.global.v2/v4 (vector)", r"st\.global\S*\.v\d"),
    ("atom.global", r"atom\.global"),
    ("red.global", r"red\.global"),
    ("cp.async (global to shared, with source size)", r"cp\.async\.c[ag]"),
    ("cp.async.bulk.tensor (TMA)", r"cp\.async\.bulk\.tensor"),
    ("cp.async.bulk (non-tensor)", r"cp\.async\.bulk(?!\.tensor|\.commit|\.wait|\.prefetch)"),
    ("ldmatrix / stmatrix (shared)", r"(ldmatrix|stmatrix)"),
    ("wgmma (shared operands by descriptor)", r"wgmma\.mma_async"),
    ("ld/st.shared", r"(ld|st)\.shared"),
    ("mbarrier (shared)", r"mbarrier\.(init|inval|arrive|try_wait|expect)"),
    ("tensormap / prefetch.tensormap", r"(tensormap|prefetch\.\S*tensormap)"),
]


def serialized(ptxas, ptx):
    """Whether ptxas (Triton's flags) reports that it serialized `ptx`'s wgmma (C7518)."""
    out = subprocess.run([ptxas, "-lineinfo", "-v", "--gpu-name=sm_90a", ptx, "-o", os.devnull], check=True, capture_output=True, text=True)
    return "C7518" in out.stdout + out.stderr


def census(ptx):
    counts = collections.Counter()
    for line in open(ptx):
        s = line.strip()
        if not s or s.startswith("//"):
            continue
        s = re.sub(r"^@!?%p\d+\s+", "", s)
        for name, pat in FORMS:
            if re.match(pat, s):
                counts[name] += 1
                break
    return counts


def main():
    native_dir, checked_dir, gasan_ptx, revision, forms_out, ptxas = sys.argv[1:7]
    revision = int(revision)
    names = sorted(os.path.basename(p)[:-6] for p in glob.glob(os.path.join(checked_dir, "*.cubin")))
    assert names, f"no cubins in {checked_dir}"
    failures = []
    rows = []
    skipped_total = collections.Counter()
    unknown_total = collections.Counter()
    forms_total = collections.Counter()
    forms_by_kernel = {}
    for name in names:
        native = os.path.join(native_dir, name + ".cubin")
        checked = os.path.join(checked_dir, name + ".cubin")
        ptx = os.path.join(checked_dir, name + ".ptx")
        if marker(native) is not None or tables(native) is not None:
            failures.append(f"{name}: the native cubin carries a marker or tables")
        m = marker(checked)
        if m is None:
            failures.append(f"{name}: the checked cubin has no marker")
            continue
        if m["format"] != 2 or m["revision"] != revision:
            failures.append(f"{name}: marker format {m['format']}, revision {m['revision']} (want 2, {revision})")
        t = tables(checked)
        if t is None:
            failures.append(f"{name}: the checked cubin has no tables")
            continue
        sites = t[1]["sites"]
        checked_ptx = os.path.join(checked_dir, name + ".checked.ptx")
        subprocess.run([gasan_ptx, "instrument", "-o", checked_ptx, ptx], check=True, capture_output=True)
        global_sites = sum(1 for s in sites if "space" not in s)
        st = stats(gasan_ptx, ptx)
        # (Checks in versioned loops' fast copies have sites of their own: `copy-chk`.)
        if global_sites != st["checked"] + st["copy_checked"]:
            failures.append(f"{name}: {global_sites} global sites, gasan-ptx stats counts {st['checked']} checks and {st['copy_checked']} in fast loop copies")
        for failure in tag_failures(name, t[0], open(checked_ptx).read()):
            failures.append(failure)
        if serialized(ptxas, checked_ptx) and not serialized(ptxas, ptx):
            failures.append(f"{name}: ptxas serializes the checked kernel's wgmma (C7518), not the native one's")
        bad, guarded, range_tested = predicate_scan(checked_ptx, ptx)
        for line, text in bad[:5]:
            failures.append(f"{name}: checked PTX line {line}: no check under the access's own guard: {text}")
        skipped_total.update(st["skipped"])
        unknown_total.update(st["unknown_opcodes"])
        c = census(ptx)
        forms_total.update(c)
        forms_by_kernel[name] = c
        lines_with_loc = sum(1 for s in sites if s.get("loc") and s["loc"]["file"].endswith(".py"))
        if sites and lines_with_loc == 0:
            failures.append(f"{name}: no site names a Python line")
        rows.append((name, st["found"], st["checked"], len(sites) - global_sites, guarded, range_tested, len(bad), lines_with_loc, len(sites),
                     " ".join(f"{k}={v}" for k, v in sorted(st["skipped"].items()))))

    # range-tested: guarded accesses of fast loop copies that their loop's range test covers.
    print(f"{'kernel':<20} {'found':>6} {'checked':>8} {'shared':>7} {'guarded':>8} {'range-tested':>12} {'unguarded':>9} {'py-line':>8}  skipped")
    for r in rows:
        print(f"{r[0]:<20} {r[1]:>6} {r[2]:>8} {r[3]:>7} {r[4]:>8} {r[5]:>12} {r[6]:>9} {r[7]:>5}/{r[8]:<3} {r[9]}")

    with open(forms_out, "w") as f:
        f.write("| form | " + " | ".join(names) + " | total |\n|---|" + "---|" * (len(names) + 1) + "\n")
        for form, _ in FORMS:
            if forms_total[form]:
                f.write(f"| {form} | " + " | ".join(str(forms_by_kernel[n][form]) for n in names) + f" | {forms_total[form]} |\n")
        f.write("\n`gasan-ptx stats` skip reasons over these kernels: " + (", ".join(f"{k}={v}" for k, v in sorted(skipped_total.items())) or "none") + "\n")
        f.write("Unknown opcodes: " + (", ".join(f"{k}={v}" for k, v in sorted(unknown_total.items())) or "none") + "\n")
    print(open(forms_out).read())
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        sys.exit(1)
    print(f"ok: {len(names)} Triton kernels checked and marked; each cubin carries its site table")


if __name__ == "__main__":
    main()
