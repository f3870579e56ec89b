#!/usr/bin/env python3
"""What the K-streamed decode kernel's whole-item split costs, per shape and token count (CPU only).

usage: bench/gpu/item_rounding.py [--parts P] [TOKENS ...]   (default 16 32 64)

Models the split of moe_cuda_decode_kst.cu at 8-row tiles (kAuto's choice at these counts, the x2
configuration): 264 CTAs (two per SM of an H200's 132), items of 24 eight-row groups (192 weight
rows) of one tile over all of K, CTA b taking items [items*b/grid, items*(b+1)/grid), as
DecodeKstKernel does. Routing as in mxserve-bench-moe-gpu: each token's top-k distinct experts
uniformly at random, one tile per expert hit (at most 8 token-slots an expert: true at these
counts but for rare collisions, which this ignores). Each CTA's work is the groups of its items
(the last item of a tile may be partial); the table prints, for gate_up and down, the mean items
per CTA and the worst CTA's work over the mean (the grid's time if every group cost the same and
no CTA sped up when its SM's other CTA finished: an upper bound on the rounding's cost), averaged
over seeded random routings. --parts P models a split finer than the kernel's: each item cut into P
equal K parts that CTAs may take separately (not built: an output's sum would then need fixed fold
points, kernels/cuda/README.md); P = 1 is the kernel as it is.
"""
import argparse
import random

SHAPES = {  # name: (hidden H, intermediate I, experts E, top-k): bench/gpu/moe_cuda_bench.cc
    "gpt-oss-120b": (2880, 2880, 128, 4),
    "gpt-oss-20b": (2880, 2880, 32, 4),
    "kimi-k2-like": (7168, 2048, 384, 8),
    "k3-latent": (3584, 3072, 256, 16),
}
CTAS, GROUPS_PER_ITEM, SAMPLES = 264, 24, 400


def split_cost(tiles, n_rows, parts=1):
    """(mean work units per CTA, worst CTA's work / mean work) for `tiles` tiles of an n_rows GEMM,
    each item cut into `parts` K parts."""
    groups = n_rows // 8
    per_tile = -(-groups // GROUPS_PER_ITEM)
    sizes = [min(GROUPS_PER_ITEM, groups - GROUPS_PER_ITEM * i) / parts for i in range(per_tile)
             for _ in range(parts)] * tiles
    items = len(sizes)
    grid = min(items, CTAS)
    work = [sum(sizes[items * b // grid:items * (b + 1) // grid]) for b in range(grid)]
    return items / grid, max(work) / (sum(work) / grid)


def main(tokens, parts):
    rng = random.Random(1)
    unit = "items" if parts == 1 else f"1/{parts} items"
    print(f"| shape | tokens | experts hit | gate_up {unit} / CTA | worst / mean | down {unit} / CTA | worst / mean |")
    print("|---|---|---|---|---|---|---|")
    for name, (h, i, e, k) in SHAPES.items():
        for t in tokens:
            acc = [0.0] * 5
            for _ in range(SAMPLES):
                hit = set()
                for _ in range(t):
                    hit.update(rng.sample(range(e), k))
                gu, dn = split_cost(len(hit), 2 * i, parts), split_cost(len(hit), h, parts)
                for j, v in enumerate((len(hit), *gu, *dn)):
                    acc[j] += v / SAMPLES
            print(f"| {name} | {t} | {acc[0]:.1f} | {acc[1]:.2f} | {acc[2]:.3f} | {acc[3]:.2f} | {acc[4]:.3f} |")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="The kst kernel's whole-item split cost (see the module docstring).")
    ap.add_argument("--parts", type=int, default=1, help="K parts per item (1: the kernel as it is)")
    ap.add_argument("tokens", type=int, nargs="*", default=[16, 32, 64])
    a = ap.parse_args()
    if a.parts < 1 or any(t < 1 for t in a.tokens):
        ap.error("--parts and TOKENS must be positive")
    main(a.tokens, a.parts)
