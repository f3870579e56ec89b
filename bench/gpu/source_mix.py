#!/usr/bin/env python3
"""The instruction mix of one kernel launch from `tests/gpu/run_all.sh source` (ncu's SASS source
page as CSV, gzipped or not): executed warp-level instructions per opcode, scaled to a unit of
work, with the warp-stall samples each opcode drew; then the most-sampled instructions; then the
instructions grouped by how many times each ran (a loop body's instructions share a count: the
hot loop, the once-per-piece bookkeeping and the once-per-warp prologue come apart).

usage: bench/gpu/source_mix.py SOURCE.csv[.gz] [UNIT_OPCODE [PER_UNIT]] [--top N]
  UNIT_OPCODE (default HGMMA) and PER_UNIT (default 2): the per-unit column divides by
  (executions of UNIT_OPCODE / PER_UNIT). For the register-A wgmma GEMM at one m64 block per
  warpgroup, HGMMA 2 gives instructions per k32 block of each warp (two k16 wgmmas per block).
Prints plain text tables; reads nothing else.
"""
import collections
import csv
import gzip
import sys


def main(argv):
    top = 25
    if "--top" in argv:
        i = argv.index("--top")
        top = int(argv[i + 1])
        argv = argv[:i] + argv[i + 2:]
    if len(argv) < 2:
        sys.exit(__doc__)
    path = argv[1]
    unit = argv[2] if len(argv) > 2 else "HGMMA"
    per_unit = float(argv[3]) if len(argv) > 3 else 2.0
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        rows = list(csv.reader(f))
    # Row 0 names the kernel; row 1 is the header.
    hdr = rows[1]
    i_src = hdr.index("Source")
    i_samp = hdr.index("Warp Stall Sampling (All Samples)")
    i_exec = hdr.index("Instructions Executed")
    ops = collections.Counter()
    samples = collections.Counter()
    lines = []
    for row in rows[2:]:
        if len(row) <= max(i_src, i_samp, i_exec):
            continue
        try:
            ex = int(row[i_exec] or 0)
            s = int(row[i_samp] or 0)
        except ValueError:
            continue
        tok = row[i_src].split()
        if not tok:
            continue
        op = (tok[1] if tok[0].startswith("@") and len(tok) > 1 else tok[0]).split(".")[0]
        ops[op] += ex
        samples[op] += s
        lines.append((s, ex, row[i_src].strip()))
    total = sum(ops.values())
    total_samples = sum(samples.values())
    units = ops[unit] / per_unit if ops[unit] else 0
    print(f"# {rows[0][1] if len(rows[0]) > 1 else rows[0][0]}")
    print(f"# {total} warp instructions executed, {total_samples} stall samples"
          + (f", {total / units:.1f} per {unit}/{per_unit:g}" if units else ""))
    print("| opcode | executed | % | per unit | stall samples | % samples |")
    print("|---|---|---|---|---|---|")
    for op, c in ops.most_common(top):
        per = f"{c / units:.2f}" if units else "-"
        print(f"| {op} | {c} | {100 * c / total:.1f} | {per} | {samples[op]} | "
              f"{100 * samples[op] / max(total_samples, 1):.1f} |")
    print("\n# most-sampled instructions: samples, executions, SASS")
    for s, ex, src in sorted(lines, reverse=True)[:top]:
        print(f"{s:7d} {ex:10d}  {src[:100]}")
    # By execution count: instructions that each ran n times, what they executed, their samples.
    by_n = collections.defaultdict(lambda: [0, 0, 0])
    for s, ex, _ in lines:
        g = by_n[ex]
        g[0] += 1
        g[1] += ex
        g[2] += s
    print("\n# instructions by execution count (the largest shares of executed instructions)")
    print("| executions each | instructions | executed | % | stall samples |")
    print("|---|---|---|---|---|")
    for n, (k, ex, s) in sorted(by_n.items(), key=lambda kv: -kv[1][1])[:12]:
        print(f"| {n} | {k} | {ex} | {100 * ex / max(total, 1):.1f} | {s} |")


if __name__ == "__main__":
    main(sys.argv)
