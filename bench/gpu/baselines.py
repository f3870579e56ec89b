#!/usr/bin/env python3
"""Ceilings and baselines measured in the same run as mxserve-bench-moe-gpu, then one table.

  python3 bench/gpu/baselines.py OURS.csv [shapes] [tokens]

* device-to-device copy (1 GiB, bytes read + written), bf16 cuBLAS matmul (torch.matmul: 8192^3
  and 16384x2880x2880), random data;
* the same MoE layer with bf16 weights through torch._grouped_mm (gather rows by expert,
  gate_up + bias, gpt-oss SwiGLU, down + bias, weighted index_add), CUDA-graph replays timed
  with events, L2 flushed and inputs rotated as in the C++ bench;
* the table: ours vs those, with §6's triton_kernels matmul_ogs figures (measured on this card
  type earlier, not in this run) for the gpt-oss-120b rows.
"""
import csv
import statistics
import sys

import torch

SHAPES = {"gpt-oss-120b": (2880, 2880, 128, 4), "gpt-oss-20b": (2880, 2880, 32, 4),
          "kimi-k2-like": (7168, 2048, 384, 8), "k3-latent": (3584, 3072, 256, 16)}
OGS_120B = {1: 0.086, 4: 0.133, 16: 0.283, 64: 0.549, 256: 0.646, 1024: 1.059, 4096: 2.471,
            16384: 7.324}  # specs/mxfp4-and-kernels.md §6
dev = torch.device("cuda")
flush = torch.empty(512 << 20, dtype=torch.uint8, device=dev)


def timed(fn, reps, sets=1, graph=True):
    """Median ms of fn(i % sets) over reps, L2 flushed before each."""
    runs = []
    if graph:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for i in range(sets):
                fn(i)
        torch.cuda.current_stream().wait_stream(s)
        graphs = []
        for i in range(sets):
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                fn(i)
            graphs.append(g)
        run = lambda i: graphs[i % sets].replay()
    else:
        run = lambda i: fn(i % sets)
    for i in range(3):
        run(i)
    for i in range(reps):
        flush.fill_(i & 0xFF)
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        run(i)
        b.record()
        b.synchronize()
        runs.append(a.elapsed_time(b))
    return statistics.median(runs)


def ceilings():
    n = 1 << 30
    src = torch.randint(0, 255, (n,), dtype=torch.uint8, device=dev)
    dst = torch.empty_like(src)
    ms = timed(lambda i: dst.copy_(src), 20, graph=False)
    copy = 2 * n / (ms * 1e-3) / 1e9
    res = {"copy_gbps": copy}
    for m, k, nn in [(8192, 8192, 8192), (16384, 2880, 2880)]:
        a = torch.randn(m, k, dtype=torch.bfloat16, device=dev)
        b = torch.randn(k, nn, dtype=torch.bfloat16, device=dev)
        ms = timed(lambda i: torch.matmul(a, b), 20, graph=False)
        res[f"mm_{m}x{k}x{nn}"] = 2 * m * k * nn / (ms * 1e-3) / 1e12
    del src, dst
    return res


def grouped_layer(H, I, E, k, T):
    gen = torch.Generator(device=dev).manual_seed(T)
    w1 = torch.randn(E, 2 * I, H, dtype=torch.bfloat16, device=dev, generator=gen) * 0.02
    w2 = torch.randn(E, H, I, dtype=torch.bfloat16, device=dev, generator=gen) * 0.02
    b1 = torch.randn(E, 2 * I, dtype=torch.bfloat16, device=dev, generator=gen)
    b2 = torch.randn(E, H, dtype=torch.bfloat16, device=dev, generator=gen)
    sets = []
    for r in range(4):
        x = torch.randn(T, H, dtype=torch.bfloat16, device=dev, generator=gen)
        ids = torch.rand(T, E, device=dev, generator=gen).topk(k, dim=1).indices.to(torch.int32)
        wts = torch.rand(T, k, device=dev, generator=gen)
        sets.append((x, ids, wts))
    out = torch.empty(T, H, dtype=torch.float32, device=dev)

    def layer(i):
        x, ids, wts = sets[i]
        flat = ids.reshape(-1)
        order = torch.argsort(flat, stable=True)
        e_sorted = flat[order]
        counts = torch.zeros(E, dtype=torch.int64, device=dev).index_add_(
            0, flat.long(), torch.ones_like(flat, dtype=torch.int64))  # bincount syncs: no graph
        offs = torch.cumsum(counts, 0).to(torch.int32)
        tok = order // k
        a = x[tok]
        gu = torch._grouped_mm(a, w1.transpose(1, 2), offs=offs) + b1[e_sorted]
        g, u = gu[:, 0::2].clamp(max=7.0), gu[:, 1::2].clamp(-7.0, 7.0)
        act = ((u + 1) * g * torch.sigmoid(1.702 * g)).to(torch.bfloat16)
        y = torch._grouped_mm(act, w2.transpose(1, 2), offs=offs) + b2[e_sorted]
        y = y.float() * wts.reshape(-1)[order].unsqueeze(1)
        out.zero_()
        out.index_add_(0, tok, y)
        return out

    reps = 12 if T >= 4096 else 30
    try:
        return timed(layer, reps, sets=4, graph=True), "graph"
    except Exception as e:  # noqa: BLE001 - report and fall back to eager
        print(f"# grouped_mm graph capture failed ({type(e).__name__}: {e}); eager", flush=True)
        return timed(layer, reps, sets=4, graph=False), "eager"


def main():
    ours_csv = sys.argv[1]
    shapes = sys.argv[2].split(",") if len(sys.argv) > 2 else ["gpt-oss-120b"]
    tokens = [int(t) for t in sys.argv[3].split(",")] if len(sys.argv) > 3 else \
        [1, 4, 16, 64, 256, 1024, 4096, 16384]
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    c = ceilings()
    print(f"# copy {c['copy_gbps']:.0f} GB/s; cuBLAS bf16 8192^3 {c['mm_8192x8192x8192']:.0f} TFLOP/s, "
          f"16384x2880x2880 {c['mm_16384x2880x2880']:.0f} TFLOP/s", flush=True)
    mm = c["mm_8192x8192x8192"]
    ours = {}
    with open(ours_csv) as f:
        for row in csv.DictReader(f):
            ours[(row["shape"], int(row["tokens"]))] = row
    print("| shape | tokens | ours ms | weight MB | ours GB/s | % copy | ours TFLOP/s | % cuBLAS | "
          "bf16 grouped_mm ms | speedup | matmul_ogs ms (§6) | vs ogs |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for s in shapes:
        H, I, E, k = SHAPES[s]
        for T in tokens:
            o = ours.get((s, T))
            try:
                g_ms, how = grouped_layer(H, I, E, k, T)
            except Exception as e:  # noqa: BLE001
                print(f"# grouped_mm {s} T={T} failed: {e}", flush=True)
                g_ms, how = float("nan"), "-"
            torch.cuda.empty_cache()
            if o is None:
                print(f"| {s} | {T} | - | - | - | - | - | - | {g_ms:.3f} | - | - | - |", flush=True)
                continue
            ms = float(o["ms"])
            ogs = OGS_120B.get(T) if s == "gpt-oss-120b" else None
            print(f"| {s} | {T} | {ms:.4f} | {float(o['weight_bytes'])/1e6:.0f} | {float(o['gbps']):.0f} | "
                  f"{100*float(o['gbps'])/c['copy_gbps']:.0f} % | {float(o['tflops']):.1f} | "
                  f"{100*float(o['tflops'])/mm:.0f} % | {g_ms:.3f} | {g_ms/ms:.2f}x | "
                  f"{ogs if ogs else '-'} | {('%.2fx' % (ogs/ms)) if ogs else '-'} |", flush=True)


if __name__ == "__main__":
    main()
