#!/usr/bin/env python3
"""How much code a profiled stretch ran: distinct instructions, 64-byte cache lines and 4 KiB pages,
from a callgrind profile taken with `--dump-instr=yes` (every object: the proxy, libc, the vDSO).
A read that starts with cold caches pays roughly per line and per page, not per instruction.

    VALGRIND_OPTS=--dump-instr=yes CG_KEEP=/tmp/cg MISS=1 \\
      bash scripts/callgrind_read.sh target/release/mcp-resource-proxy 300
    python3 scripts/code_footprint.py /tmp/cg/cg.2026
"""

import sys


def addresses(path):
    """Every instruction address with a cost line (absolute `0x…`, or `+n`/`-n` from the last)."""
    seen, address = set(), 0
    with open(path, encoding="utf-8", errors="replace") as profile:
        for line in profile:
            first = line.split(maxsplit=1)[0] if line.strip() else ""
            try:
                if first.startswith("0x"):
                    address = int(first, 16)
                elif first[:1] in "+-" and len(first) > 1:
                    address += int(first, 16) if first[0] == "+" else -int(first[1:], 16)
                elif first != "*":
                    continue
            except ValueError:
                continue
            seen.add(address)
    return seen


def main():
    seen = addresses(sys.argv[1])
    lines = {address >> 6 for address in seen}
    pages = {address >> 12 for address in seen}
    print(f"{len(seen)} instructions, {len(lines)} lines of 64 B, {len(pages)} pages of 4 KiB")


if __name__ == "__main__":
    main()
