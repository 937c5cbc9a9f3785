#!/usr/bin/env python3
"""Filter for `cargo test ... -- --show-output 2>&1`: passes cargo's output through, but instead of
the captured output of passing tests prints one `SKIPPED: cargo test BINARY TEST: REASON` line for
each passing test that printed a line starting with `skipped` or `SKIPPED` (a test whose prerequisite
is missing returns early and says so; libtest itself can only call it passed). scripts/test.sh
collects these lines into its summary. Exit status is always 0: the pipeline's status is cargo's."""
import re
import sys

SKIP = re.compile(r"^\s*skipped\b[:\s]*(.*)", re.I)
RUNNING = re.compile(r"^\s*Running (?:unittests )?(\S+) \((?:.*/)?([^/]+?)(?:-[0-9a-f]{16})?\)")
DOCTESTS = re.compile(r"^\s*Doc-tests (\S+)")
BLOCK = re.compile(r"^---- (.+) stdout ----$")


def main() -> None:
    binary = "?"
    mode = "normal"  # normal | successes (captured output) | names (list of passing tests)
    test = None
    skips = []
    for raw in sys.stdin:
        line = raw.rstrip("\n")
        if mode == "normal":
            m = RUNNING.match(line)
            if m:
                binary = f"{m.group(2)} ({m.group(1)})"
            m = DOCTESTS.match(line)
            if m:
                binary = f"{m.group(1)} (doc-tests)"
            if line == "successes:":
                mode, test = "successes", None
                continue
            print(line, flush=True)
        elif mode == "successes":
            m = BLOCK.match(line)
            if m:
                test = m.group(1)
            elif line == "successes:":
                mode = "names"
            elif test is not None:
                s = SKIP.match(line)
                if s:
                    reason = s.group(1) or line.strip()
                    skips.append(f"SKIPPED: cargo test {binary} {test}: {reason}")
                    print(skips[-1], flush=True)
        else:  # names: suppressed until the failures or the result line
            if line == "failures:" or line.startswith("test result:"):
                mode = "normal"
                print(line, flush=True)


if __name__ == "__main__":
    main()
