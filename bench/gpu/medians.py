#!/usr/bin/env python3
"""Medians of alternating bench runs, one column per setting (tests/gpu/run_all.sh envab).

usage: bench/gpu/medians.py FILE
FILE holds `mxserve-bench-moe-gpu` table rows, each prefixed by the setting it ran under:
  <setting> | <shape> | <tokens> | <ms> | ... |
Prints one markdown row per (shape, tokens, path): the median ms under each setting (in the order
the settings first appear), then the first setting's median over the last's (> 1: the last is
faster).
"""
import statistics
import sys


def main(path):
    runs = {}  # (shape, tokens, path) -> setting -> [ms]
    settings = []
    for line in open(path):
        cells = [c.strip() for c in line.split("|")]
        if len(cells) < 5 or not cells[2].isdigit():
            continue
        setting, shape, tokens, ms = cells[0], cells[1], int(cells[2]), float(cells[3])
        path = cells[-2] if cells[-1] == "" else cells[-1]
        if setting not in settings:
            settings.append(setting)
        runs.setdefault((shape, tokens, path), {}).setdefault(setting, []).append(ms)
    if not runs:
        sys.exit(f"{path}: no bench rows")
    print("| shape | tokens | path | " + " | ".join(settings) + f" | {settings[0]} / {settings[-1]} |")
    print("|---|---|---|" + "---|" * (len(settings) + 1))
    for (shape, tokens, path), by in sorted(runs.items()):
        med = [statistics.median(by[s]) if s in by else None for s in settings]
        cells = ["-" if m is None else f"{m:.4f}" for m in med]
        ratio = f"{med[0] / med[-1]:.3f}" if med[0] and med[-1] else "-"
        print(f"| {shape} | {tokens} | {path} | " + " | ".join(cells) + f" | {ratio} |")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
