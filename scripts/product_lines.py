#!/usr/bin/env python3
"""Lines of product code at a git revision (default: the work tree's HEAD), as CI prints them.

Product code is every `.rs` file under `src/` of the workspace's product crates (the root
package; not `crates/fixture` or `crates/bench`, which are never shipped), without test code:
files named `tests.rs` or `*_tests.rs`, anything under a `tests/` or `module_graph/` folder, and
an item under `#[cfg(test)]` (an inline test module and its braces, or its `mod tests;` line). Every other line counts, comments and blank lines included.

    python3 scripts/product_lines.py                  # HEAD
    python3 scripts/product_lines.py 7df4437          # another revision
    python3 scripts/product_lines.py --since 7df4437  # each commit on main's first-parent line
                                                      # since then, with what it changed

At 7df4437 (before the round that set out to shrink it): 33,145 lines.
"""

import subprocess
import sys

NOT_PRODUCT = ("crates/fixture/", "crates/bench/")


def files(rev):
    listed = subprocess.run(
        ["git", "ls-tree", "-r", "--name-only", rev], capture_output=True, text=True, check=True
    ).stdout.split()
    for path in listed:
        name = path.rsplit("/", 1)[-1]
        if not path.endswith(".rs") or path.startswith(NOT_PRODUCT):
            continue
        if not (path.startswith("src/") or (path.startswith("crates/") and "/src/" in path)):
            continue
        if name == "tests.rs" or name.endswith("_tests.rs") or "/tests/" in path or "/module_graph/" in path:
            continue
        yield path


def counted(text):
    """Lines of `text` outside the items `#[cfg(test)]` marks (a `mod tests;` line, or an item
    and its braces)."""
    total, skipping, depth, opened = 0, False, 0, False
    for line in text.splitlines():
        code = line.split("//", 1)[0]
        if skipping:
            depth += code.count("{") - code.count("}")
            opened = opened or "{" in code
            if (opened and depth <= 0) or (not opened and code.rstrip().endswith(";")):
                skipping = False
            continue
        if line.strip().startswith("#[cfg(test)]"):
            skipping, depth, opened = True, 0, False
            continue
        total += 1
    return total


def total(rev):
    """Product lines at `rev`, its files read in one `git cat-file --batch`."""
    asked = "".join(f"{rev}:{path}\n" for path in files(rev)).encode()
    out = subprocess.run(["git", "cat-file", "--batch"], input=asked, capture_output=True, check=True).stdout
    lines, at = 0, 0
    while at < len(out):
        head_end = out.index(b"\n", at)
        size = int(out[at:head_end].split()[2])
        lines += counted(out[head_end + 1 : head_end + 1 + size].decode())
        at = head_end + 1 + size + 1
    return lines


def walk(since):
    """Each first-parent commit after `since` up to HEAD: its figure, what it changed, its subject."""
    log = ["git", "log", "--first-parent", "--reverse", "--format=%h\t%s", f"{since}..HEAD"]
    commits = subprocess.run(log, capture_output=True, text=True, check=True).stdout.splitlines()
    before = total(since)
    print(f"{since}\t{before:,}")
    for commit in commits:
        rev, subject = commit.split("\t", 1)
        now = total(rev)
        if now != before:
            print(f"{rev}\t{now:,}\t{now - before:+,}\t{subject[:100]}")
        before = now


def main():
    if sys.argv[1:2] == ["--since"]:
        walk(sys.argv[2])
        return
    rev = sys.argv[1] if len(sys.argv) > 1 else "HEAD"
    print(f"product code at {rev}: {total(rev):,} lines")


if __name__ == "__main__":
    main()
