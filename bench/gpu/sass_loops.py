#!/usr/bin/env python3
"""The innermost loops of kernels in `cuobjdump -sass` output: for each function whose name
matches REGEX, each backward branch's body that holds at least MIN_MMA tensor instructions
(HGMMA or HMMA), with its instruction count and that count per k32 block of a warp (two k16
mma per block). Reads what the device printed; builds nothing; the `sass` step of
tests/gpu/run_all.sh runs it.

usage: bench/gpu/sass_loops.py FILE.sass [REGEX [MIN_MMA]]
  REGEX (default "Wgmma|Decode"): a Python regular expression searched in the mangled name.
  MIN_MMA (default 4). Only the smallest such loop of each function (the innermost) is printed
  unless --all is given.
"""
import re
import sys


def functions(path):
    """{mangled name: [(address, instruction text)]} in file order."""
    out, cur = {}, None
    with open(path) as f:
        for line in f:
            m = re.search(r"Function : (\S+)", line)
            if m:
                cur = m.group(1)
                out[cur] = []
                continue
            m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
            if m and cur:
                out[cur].append((int(m.group(1), 16), m.group(2)))
    return out


def loops(ins, min_mma):
    """(start, end, instruction count, mma count) of each backward branch's body, smallest first."""
    res = []
    for addr, text in ins:
        if "BRA" not in text:
            continue
        m = re.search(r"0x([0-9a-f]+)", text)
        if not m or int(m.group(1), 16) >= addr:
            continue
        start = int(m.group(1), 16)
        body = [t for a, t in ins if start <= a <= addr]
        mma = sum(1 for t in body if re.search(r"\bH[G]?MMA\b", t.split()[1] if t.startswith("@") else t.split()[0]))
        if mma >= min_mma:
            res.append((start, addr, len(body), mma))
    res.sort(key=lambda r: r[2])
    return res


def main(argv):
    show_all = "--all" in argv
    argv = [a for a in argv if a != "--all"]
    if len(argv) < 2:
        sys.exit(__doc__)
    pattern = re.compile(argv[2] if len(argv) > 2 else "Wgmma|Decode")
    min_mma = int(argv[3]) if len(argv) > 3 else 4
    print("| function | loop | instructions | mma | per k32 block |")
    print("|---|---|---|---|---|")
    for name, ins in functions(argv[1]).items():
        if not pattern.search(name):
            continue
        found = loops(ins, min_mma)
        for start, end, n, mma in found if show_all else found[:1]:
            print(f"| {name} | {start:#x}-{end:#x} | {n} | {mma} | {n / (mma / 2):.1f} |")


if __name__ == "__main__":
    main(sys.argv)
