#!/usr/bin/env python3
"""The proxy's hot-path link order (src/hot-path.order, read by build.rs) from callgrind
profiles taken with `--demangle=no`: every function of the proxy binary that ran, hottest first,
each profile weighted equally (a hit's few functions are not outranked by a miss's many).
Standard library only; used by scripts/link_order.sh.

    python3 scripts/link_order.py BINARY_NAME CALLGRIND_FILE... > src/hot-path.order
"""

import collections
import re
import sys

NAMED = re.compile(r"\((\d+)\)(?: (.*))?")
# callgrind marks a recursive activation with a suffix: `name'2` is `name`.
RECURSION = re.compile(r"'\d+$")


def self_cost(path, binary):
    """Instructions per function symbol of `binary`, counted where they ran (not in callees)."""
    objects, functions, cost = {}, {}, collections.Counter()
    function, in_binary, call_line = None, False, False
    with open(path, encoding="utf-8", errors="replace") as profile:
        for line in profile:
            key, _, rest = line.partition("=")
            if key in ("ob", "cob"):
                number, name = NAMED.match(rest.strip()).groups()
                if name:
                    objects[number] = name
                if key == "ob":
                    in_binary = objects.get(number, "").endswith("/" + binary)
            elif key in ("fn", "cfn"):
                number, name = NAMED.match(rest.strip()).groups()
                if name:
                    functions[number] = RECURSION.sub("", name)
                if key == "fn":
                    function = functions[number]
            elif key == "calls":
                call_line = True  # the next cost line is the call's inclusive cost
            elif line[:1].isdigit() or line[:1] in "+-*":
                if call_line:
                    call_line = False
                elif in_binary and function:
                    fields = line.split()
                    if len(fields) >= 2 and fields[-1].isdigit():
                        cost[function] += int(fields[-1])
    return cost


def main():
    binary, paths = sys.argv[1], sys.argv[2:]
    weight = collections.Counter()
    for path in paths:
        cost = self_cost(path, binary)
        total = sum(cost.values()) or 1
        for function, instructions in cost.items():
            weight[function] += instructions / total
    order = [function for function, _ in weight.most_common()]
    print("\n".join(order))
    print(f"{len(order)} functions from {len(paths)} profiles", file=sys.stderr)


if __name__ == "__main__":
    main()
