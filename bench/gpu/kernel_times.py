#!/usr/bin/env python3
"""One layer's kernels, one row each: ncu's duration and DRAM traffic (tests/gpu/run_all.sh kernels).

usage: bench/gpu/kernel_times.py NCU_CSV [LABEL]
NCU_CSV: `ncu --csv --print-units base --metrics gpu__time_duration.sum,dram__bytes_read.sum,
dram__bytes_write.sum` output of one forward (kernels serialized by ncu, so no overlap between
them: the sum is an upper bound on the layer's time). Prints a markdown table: kernel, grid,
us, MB read, MB written, GB/s, share of the sum.
"""
import csv
import sys


def main(path, label):
    rows = {}  # ID -> dict
    with open(path) as f:
        lines = [l for l in f if l.startswith('"')]
    for r in csv.DictReader(lines):
        k = rows.setdefault(r["ID"], {"name": r["Kernel Name"], "grid": r.get("Grid Size", "")})
        try:
            k[r["Metric Name"]] = float(r["Metric Value"].replace(",", ""))
        except ValueError:
            pass
    if not rows:
        sys.exit(f"{path}: no kernel rows")
    # One forward: up to the first kernel's next launch (the bench runs one forward per input set).
    ids = sorted(rows, key=int)
    first = rows[ids[0]]["name"]
    for j, i in enumerate(ids[1:], 1):
        if rows[i]["name"] == first:
            rows = {x: rows[x] for x in ids[:j]}
            break
    total = sum(k.get("gpu__time_duration.sum", 0) for k in rows.values())
    print(f"| {label} kernel | grid | us | MB read | MB written | GB/s | share |")
    print("|---|---|---|---|---|---|---|")
    for k in (rows[i] for i in sorted(rows, key=int)):
        ns = k.get("gpu__time_duration.sum", 0)
        rd, wr = k.get("dram__bytes_read.sum", 0), k.get("dram__bytes_write.sum", 0)
        name = k["name"].split("(")[0].split("<")[0].replace("void ", "")
        gbs = (rd + wr) / ns if ns else 0
        print(f"| {name} | {k['grid']} | {ns / 1e3:.1f} | {rd / 1e6:.1f} | {wr / 1e6:.1f} | {gbs:.0f} | "
              f"{100 * ns / total:.0f} % |")
    print(f"| sum | | {total / 1e3:.1f} | | | | |")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "")
