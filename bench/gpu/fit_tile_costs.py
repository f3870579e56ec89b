#!/usr/bin/env python3
"""kAuto's per-configuration cost (kernels/cuda/moe_cuda_tile_choice.h, kAutoTiles.ps_per_byte)
from forced-path timings: `tests/gpu/run_all.sh paths` CSVs (shape, tokens, ms, weight_bytes, ...,
path), as in tests/data/tile_paths.

The model: a call costs experts x E[ceil(X / rows)] x (bytes per expert) x ps_per_byte, with X an
expert's token-slots, Poisson with mean tokens x top_k / experts (moe_cuda_tile_choice.h). Each
row gives one ps_per_byte = ms / (experts x E[tiles] x bytes per expert); a configuration's cost is
the mean over its rows, printed with its range across rows (the spread of the model).

usage: bench/gpu/fit_tile_costs.py CSV... [--paths p1,p2,...]
Bytes per expert: the largest weight_bytes of the shape's rows / its experts (every expert is hit
at the larger counts). Shapes: gpt-oss-120b (top-4 of 128), kimi-k2-like (8 of 384), k3-latent
(16 of 256), gpt-oss-20b (4 of 32). Rows named `auto` or a mix (`a+b`) are skipped.
"""
import collections
import csv
import math
import sys

SHAPES = {"gpt-oss-120b": (4, 128), "kimi-k2-like": (8, 384), "k3-latent": (16, 256), "gpt-oss-20b": (4, 32)}
ROWS = {"decode": 8, "decode16": 16, "decode24": 24, "wgmma8": 8, "wgmma16": 16, "wgmma24": 24, "mid": 32,
        "wgmma32": 32, "wgmma40": 40, "wgmma48": 48, "wgmma64": 64, "wgmma96": 96, "wgmma": 128, "wgmma192": 192,
        "wgmma256": 256}


def expected_tiles(mean, rows):
    """E[ceil(X / rows)], X ~ Poisson(mean): the pmf by its ratio recurrence from the mode, over
    mode +- 12 sd + 10 (as PoissonEach in moe_cuda_tile_choice.h)."""
    if mean <= 0:
        return 0.0
    sd = math.sqrt(mean)
    mode = int(mean)
    lo = max(0, mode - int(12 * sd) - 10)
    hi = mode + int(12 * sd) + 10
    total = acc = 0.0
    w = 1.0
    total += w
    acc += w * ((mode + rows - 1) // rows)
    for x in range(mode, lo, -1):
        w *= x / mean
        total += w
        acc += w * ((x - 1 + rows - 1) // rows)
    w = 1.0
    for x in range(mode, hi):
        w *= mean / (x + 1)
        total += w
        acc += w * ((x + 1 + rows - 1) // rows)
    return acc / total


def main(argv):
    only = None
    if "--paths" in argv:
        i = argv.index("--paths")
        only = set(argv[i + 1].split(","))
        argv = argv[:i] + argv[i + 2:]
    files = argv[1:]
    if not files:
        sys.exit(__doc__)
    rows = []
    for f in files:
        with open(f) as fh:
            rows += list(csv.DictReader(fh))
    per_expert = collections.defaultdict(float)
    for r in rows:
        if r["shape"] in SHAPES:
            per_expert[r["shape"]] = max(per_expert[r["shape"]], float(r["weight_bytes"]) / SHAPES[r["shape"]][1])
    fits = collections.defaultdict(list)
    for r in rows:
        path, shape = r["path"], r["shape"]
        if path not in ROWS or shape not in SHAPES or (only and path not in only):
            continue
        top_k, experts = SHAPES[shape]
        mean = int(r["tokens"]) * top_k / experts
        tiles = expected_tiles(mean, ROWS[path])
        ps = float(r["ms"]) * 1e9 / (experts * tiles * per_expert[shape])
        fits[path].append((ps, shape, int(r["tokens"])))
    print("| path | rows | runs | ps per byte and tile (mean) | min | max | min / mean | max / mean |")
    print("|---|---|---|---|---|---|---|---|")
    for path in sorted(fits, key=lambda p: (ROWS[p], p)):
        v = [x[0] for x in fits[path]]
        m = sum(v) / len(v)
        print(f"| {path} | {ROWS[path]} | {len(v)} | {m:.4f} | {min(v):.4f} | {max(v):.4f} | "
              f"{min(v) / m:.3f} | {max(v) / m:.3f} |")


if __name__ == "__main__":
    main(sys.argv)
