// The device kernels of the CUDA MoE path other than the decode GEMM (moe_cuda_decode.cu): layout
// conversion, routing, gather, the general (mid/prefill) grouped GEMM, combine; and launchers.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cub/block/block_scan.cuh>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <type_traits>
#include <vector>

#include "core/bf16.h"
#include "kernels/cuda/moe_cuda_gemm.cuh"
#include "kernels/cuda/moe_cuda_launch.h"
#include "kernels/cuda/moe_cuda_variant.h"
#include "kernels/cuda/moe_cuda_tile_choice.h"

namespace mxserve::kernels::cuda::internal {

// ---- layout conversion (once, at upload) ----------------------------------------------------
// One thread per (row group, chunk, lane): writes the lane's 16 (or 8) bytes and, for t == 0,
// the row's 4 scale bytes. src: checkpoint blocks [n][k/32][16], scales [n][k/32].
__global__ void SwizzleKernel(const uint8_t* __restrict__ src_q, const uint8_t* __restrict__ src_s,
                              uint8_t* __restrict__ dst_q, uint8_t* __restrict__ dst_s, int n,
                              int k, int kp, int nfull, int chunks) {
  const int64_t idx = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t total = int64_t(n / 8) * chunks * 32;
  if (idx >= total) return;
  const int lane = int(idx & 31);
  const int c = int((idx >> 5) % chunks);
  const int rg = int((idx >> 5) / chunks);
  const int g = lane >> 2, t = lane & 3;
  const int row = rg * 8 + g;
  const int S = (c < nfull) ? 8 : 4;
  const int row_bytes = k / 2;
  const uint8_t* srow = src_q + int64_t(row) * row_bytes;
  uint32_t words[4] = {0, 0, 0, 0};
  for (int r = 0; r < 2 * S; ++r) {
    const int s = r >> 1, h = r & 1;
    const int byte = c * 64 + 8 * s + t + 4 * h;
    const uint32_t v = byte < row_bytes ? srow[byte] : 0u;
    words[r >> 2] |= PackNibble(v & 0xF, r & 3, 0) | PackNibble(v >> 4, r & 3, 1);
  }
  uint8_t* dq = dst_q + int64_t(rg) * 8 * (kp / 2) + int64_t(c) * 512 + lane * (S * 2);
  uint32_t* d32 = reinterpret_cast<uint32_t*>(dq);
  for (int w = 0; w < S / 2; ++w) d32[w] = words[w];
  if (t == 0) {
    const int nblk = k / 32;
    uint8_t* ds = dst_s + (int64_t(rg) * chunks + c) * 32 + g * 4;
    for (int b = 0; b < 4; ++b) {
      const int blk = c * 4 + b;
      ds[b] = blk < nblk ? src_s[int64_t(row) * nblk + blk] : uint8_t{127};
    }
  }
}

void LaunchSwizzle(const uint8_t* src_q, const uint8_t* src_s, uint8_t* dst_q, uint8_t* dst_s,
                   int n, int k, int kp, cudaStream_t stream) {
  const int nfull = kp / 128, chunks = (kp + 127) / 128;
  const int64_t total = int64_t(n / 8) * chunks * 32;
  SwizzleKernel<<<unsigned((total + 255) / 256), 256, 0, stream>>>(src_q, src_s, dst_q, dst_s, n,
                                                                   k, kp, nfull, chunks);
}

// ---- routing ---------------------------------------------------------------------------------
// meta layout: counts [nh], offsets [nh + 1] (offsets[nh] = pairs), cursors [nh], ntiles [1],
// ntiles2 [1] (kMix: the small tiles' count).
// The held expert (local index) of expert id e, or -1: a skipped slot (-1), an id out of range,
// or an expert this worker does not hold.
__device__ __forceinline__ int HeldOf(int e, const int32_t* __restrict__ local, int num_experts) {
  return (e >= 0 && e < num_experts) ? local[e] : -1;
}

// Pair p takes the next row of held expert h (its cursor in meta), recorded in sorted; returns
// the row.
__device__ __forceinline__ int TakeRow(int32_t* __restrict__ meta, int nh, int h, int p,
                                       int32_t* __restrict__ sorted) {
  const int pos = meta[nh + h] + atomicAdd(&meta[2 * nh + 1 + h], 1);
  sorted[pos] = p;
  return pos;
}

__global__ void CountKernel(const int32_t* __restrict__ ids, int pairs, const int32_t* __restrict__ local,
                            int num_experts, int32_t* __restrict__ counts) {
  const int p = blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= pairs) return;
  const int h = HeldOf(ids[p], local, num_experts);
  if (h >= 0) atomicAdd(&counts[h], 1);
}

// One block of 1024 threads: exclusive scans of counts and of tiles per expert; writes the tile
// list (held expert, first row, rows). kMix: each expert's tiles cut by SplitTiles, the big ones
// into `tiles`, the small ones into `tiles2`.
template <bool kMix>
__global__ void __launch_bounds__(1024) ScanKernel(int32_t* __restrict__ meta, int nh, int bm,
                                                   int32_t* __restrict__ tiles, int bm2, int rmax,
                                                   int32_t* __restrict__ tiles2) {
  __shared__ int32_t s_rows[1024], s_tiles[1024], s_tiles2[kMix ? 1024 : 1];
  int32_t* counts = meta;
  int32_t* offsets = meta + nh;
  int32_t* ntiles = meta + 3 * nh + 1;
  const int per = (nh + 1023) / 1024;
  const int lo = threadIdx.x * per, hi = min(nh, lo + per);
  int rows = 0, tl = 0, tl2 = 0;
  for (int h = lo; h < hi; ++h) {
    rows += counts[h];
    if constexpr (kMix) {
      int nb, ns;
      SplitTiles(counts[h], bm, bm2, rmax, &nb, &ns);
      tl += nb;
      tl2 += ns;
    } else {
      tl += (counts[h] + bm - 1) / bm;
    }
  }
  s_rows[threadIdx.x] = rows;
  s_tiles[threadIdx.x] = tl;
  if constexpr (kMix) s_tiles2[threadIdx.x] = tl2;
  __syncthreads();
  for (int d = 1; d < 1024; d <<= 1) {
    const int r = threadIdx.x >= d ? s_rows[threadIdx.x - d] : 0;
    const int q = threadIdx.x >= d ? s_tiles[threadIdx.x - d] : 0;
    int q2 = 0;
    if constexpr (kMix) q2 = threadIdx.x >= d ? s_tiles2[threadIdx.x - d] : 0;
    __syncthreads();
    s_rows[threadIdx.x] += r;
    s_tiles[threadIdx.x] += q;
    if constexpr (kMix) s_tiles2[threadIdx.x] += q2;
    __syncthreads();
  }
  int row = s_rows[threadIdx.x] - rows, tile = s_tiles[threadIdx.x] - tl;
  int tile2 = 0;
  if constexpr (kMix) tile2 = s_tiles2[threadIdx.x] - tl2;
  for (int h = lo; h < hi; ++h) {
    offsets[h] = row;
    const int c = counts[h];
    if constexpr (kMix) {
      int nb, ns;
      SplitTiles(c, bm, bm2, rmax, &nb, &ns);
      tile = WriteTiles(tiles, tile, h, row, 0, min(nb * bm, c), bm);
      tile2 = WriteTiles(tiles2, tile2, h, row, nb * bm, c, bm2);
    } else {
      tile = WriteTiles(tiles, tile, h, row, 0, c, bm);
    }
    row += c;
  }
  if (threadIdx.x == 1023) {
    offsets[nh] = s_rows[1023];
    *ntiles = s_tiles[1023];
    if constexpr (kMix) ntiles[1] = s_tiles2[1023];
  }
}

__global__ void PlaceKernel(const int32_t* __restrict__ ids, int pairs, const int32_t* __restrict__ local,
                            int num_experts, int32_t* __restrict__ meta, int nh,
                            int32_t* __restrict__ sorted) {
  const int p = blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= pairs) return;
  const int h = HeldOf(ids[p], local, num_experts);
  if (h >= 0) TakeRow(meta, nh, h, p, sorted);
}

// Small batches (pairs <= kSmallPairs, nh <= 1024): count, scan, tile list and placement in one
// CTA, so decode pays one launch for routing, not four. (Gathering up to 64 slots' rows in it
// too held the GEMMs back: 16 tokens of gpt-oss-120b 0.2625 against 0.2369 ms with GatherKernel
// after it.)
constexpr int kSmallPairs = 8192;

template <bool kMix>
__global__ void __launch_bounds__(1024) RouteSmallKernel(const int32_t* __restrict__ ids, int pairs,
                                                         const int32_t* __restrict__ local, int num_experts,
                                                         int nh, int bm, int32_t* __restrict__ meta,
                                                         int32_t* __restrict__ tiles, int32_t* __restrict__ sorted,
                                                         int bm2, int rmax, int32_t* __restrict__ tiles2) {
  // Rows and tiles per expert are scanned together, packed as rows | tiles << 16 (both totals
  // stay below 2^16: pairs <= kSmallPairs, tiles <= pairs + nh); kMix: | small tiles << 32.
  using Packed = std::conditional_t<kMix, int64_t, int32_t>;
  using Scan = cub::BlockScan<Packed, 1024>;
  __shared__ typename Scan::TempStorage scan_tmp;
  __shared__ int32_t cnt[1024], cur[1024];
  PdlLaunchDependents();  // the GEMM after us may take its place on the SMs; it waits for us
  const int tid = threadIdx.x;
  cnt[tid] = 0;
  cur[tid] = 0;
  // Each thread's slots' held experts (-1: skipped), read once: the ids -> local chain is two
  // dependent global reads, a good part of this kernel's time at one token.
  int my_h[kSmallPairs / 1024];
#pragma unroll
  for (int i = 0; i < kSmallPairs / 1024; ++i) {
    const int p = tid + 1024 * i;
    my_h[i] = HeldOf(p < pairs ? ids[p] : -1, local, num_experts);
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < kSmallPairs / 1024; ++i) {
    if (my_h[i] >= 0) atomicAdd(&cnt[my_h[i]], 1);
  }
  __syncthreads();
  const int c = tid < nh ? cnt[tid] : 0;
  int tl, ns = 0;
  if constexpr (kMix) {
    SplitTiles(c, bm, bm2, rmax, &tl, &ns);
  } else {
    tl = (c + bm - 1) / bm;
  }
  Packed mine = c | (tl << 16), packed = 0, total = 0;
  if constexpr (kMix) mine |= Packed(ns) << 32;
  Scan(scan_tmp).ExclusiveSum(mine, packed, total);
  const int row = int(packed & 0xFFFF);
  int tile = int(packed >> 16) & 0xFFFF;
  if (tid < nh) {
    meta[nh + tid] = row;
    if constexpr (kMix) {
      WriteTiles(tiles, tile, tid, row, 0, min(tl * bm, c), bm);
      WriteTiles(tiles2, int(packed >> 32), tid, row, tl * bm, c, bm2);
    } else {
      WriteTiles(tiles, tile, tid, row, 0, c, bm);
    }
  }
  if (tid == 0) {
    meta[2 * nh] = int(total & 0xFFFF);
    meta[3 * nh + 1] = int(total >> 16) & 0xFFFF;
    if constexpr (kMix) meta[3 * nh + 2] = int(total >> 32);
  }
  __syncthreads();
  if (tid < nh) cnt[tid] = row;  // now: first row of each expert
  __syncthreads();
#pragma unroll
  for (int i = 0; i < kSmallPairs / 1024; ++i) {
    const int hh = my_h[i];
    if (hh < 0) continue;
    sorted[cnt[hh] + atomicAdd(&cur[hh], 1)] = tid + 1024 * i;
  }
}

// a[row][d] = bf16(x[token(row)][k(d)]) in the permuted order, or (plain) in K order (0 in the K
// padding).
__global__ void GatherKernel(const float* __restrict__ x, int h, int kp, int nfull, int top_k,
                             const int32_t* __restrict__ sorted, const int32_t* __restrict__ total,
                             uint16_t* __restrict__ a, bool plain) {
  // Launched with PDL after the placement: sorted and total come from it. The GEMM after this
  // may start only once the placement (and the tile list before it) has finished: it reads the
  // tile list before its own wait (GemmArgs::early_weights), hence the order of these two.
  PdlWait();
  PdlLaunchDependents();
  const int row = blockIdx.x;
  if (row >= *total) return;
  const float* xr = x + int64_t(sorted[row] / top_k) * h;
  uint16_t* ar = a + int64_t(row) * kp;
  for (int i = threadIdx.x; i < kp / 8; i += blockDim.x) GatherItem(xr, ar, i, nfull, h, plain);
}

// Variant::gather_rows: the large-batch routing places and gathers per slot row (PlaceKernel +
// GatherKernel) instead of per token.
bool PlaceGatherSetting() { return !CurrentVariant().gather_rows; }

// Large batches: placement and gather per token (one CTA each), so that each x row is read once
// and converted once for all of its slots (the per-row GatherKernel reads it top_k times: at
// 16384 tokens x is 189 MB, past L2, so that was top_k reads from DRAM). Each held slot takes
// the next row of its expert (TakeRow, as PlaceKernel) and receives the row's bf16 values.
__global__ void __launch_bounds__(256) PlaceGatherKernel(const int32_t* __restrict__ ids, int top_k,
                                                         const int32_t* __restrict__ local, int num_experts,
                                                         int32_t* __restrict__ meta, int nh,
                                                         int32_t* __restrict__ sorted, const float* __restrict__ x,
                                                         int h, int kp, int nfull, uint16_t* __restrict__ a,
                                                         bool plain) {
  PdlLaunchDependents();
  __shared__ int32_t s_pos[32];
  __shared__ int s_n;
  const int t = blockIdx.x;
  if (threadIdx.x < 32) {
    const int j = threadIdx.x;
    int pos = -1;
    if (j < top_k) {
      const int p = t * top_k + j;
      const int hh = HeldOf(ids[p], local, num_experts);
      if (hh >= 0) pos = TakeRow(meta, nh, hh, p, sorted);
    }
    // The held slots' rows, compacted in slot order (lane order).
    const unsigned held = __ballot_sync(0xFFFFFFFFu, pos >= 0);
    if (pos >= 0) s_pos[__popc(held & ((1u << j) - 1))] = pos;
    if (j == 0) s_n = __popc(held);
  }
  __syncthreads();
  const int n = s_n;
  if (n == 0) return;
  const float* xr = x + int64_t(t) * h;
  for (int i = threadIdx.x; i < kp / 8; i += blockDim.x) {
    const uint4 v = GatherLoad(xr, i, nfull, h, plain);
    for (int q = 0; q < n; ++q) reinterpret_cast<uint4*>(a + int64_t(s_pos[q]) * kp)[i] = v;
  }
}

// out[t][:] = sum over valid slots j (in slot order) of y[t*k+j][:].
__global__ void CombineKernel(const float* __restrict__ y, const int32_t* __restrict__ ids,
                              const int32_t* __restrict__ local, int num_experts, int top_k, int h,
                              float* __restrict__ out) {
  PdlWait();  // y comes from the down GEMM
  const int t = blockIdx.x;
  const uint32_t valid = HeldSlots(ids, local, num_experts, top_k, t);
  const int h4 = h / 4;
  for (int c = threadIdx.x; c < h4; c += blockDim.x) {
    reinterpret_cast<float4*>(out + int64_t(t) * h)[c] = SumSlots(y, valid, top_k, h, t, c);
  }
}

void LaunchRouting(const RoutingArgs& r, cudaStream_t stream) {
  const int pairs = r.tokens * r.top_k;
  if (pairs == 0) return;
  // One CTA per slot row, after the kernel that placed the rows.
  auto gather_rows = [&] {
    LaunchPdl(GatherKernel, dim3(pairs), dim3(256), 0, stream, r.x, r.hidden, r.kp_h, r.kp_h / 128, r.top_k,
              r.sorted, r.meta + 2 * r.nh, r.a, r.plain_k);
  };
  if (pairs <= kSmallPairs && r.nh <= 1024) {
    auto* route = r.bm2 > 0 ? RouteSmallKernel<true> : RouteSmallKernel<false>;
    route<<<1, 1024, 0, stream>>>(r.ids, pairs, r.local, r.num_experts, r.nh, r.bm, r.meta, r.tiles, r.sorted,
                                  r.bm2, r.rmax, r.tiles2);
    gather_rows();
    return;
  }
  cudaMemsetAsync(r.meta, 0, sizeof(int32_t) * (3 * r.nh + 3), stream);
  CountKernel<<<(pairs + 255) / 256, 256, 0, stream>>>(r.ids, pairs, r.local, r.num_experts, r.meta);
  auto* scan = r.bm2 > 0 ? ScanKernel<true> : ScanKernel<false>;
  scan<<<1, 1024, 0, stream>>>(r.meta, r.nh, r.bm, r.tiles, r.bm2, r.rmax, r.tiles2);
  if (PlaceGatherSetting()) {
    PlaceGatherKernel<<<r.tokens, 256, 0, stream>>>(r.ids, r.top_k, r.local, r.num_experts, r.meta, r.nh,
                                                    r.sorted, r.x, r.hidden, r.kp_h, r.kp_h / 128, r.a, r.plain_k);
    return;
  }
  PlaceKernel<<<(pairs + 255) / 256, 256, 0, stream>>>(r.ids, pairs, r.local, r.num_experts, r.meta,
                                                       r.nh, r.sorted);
  gather_rows();
}

void LaunchCombine(const float* y, int h, const CombineArgs& c, cudaStream_t stream) {
  if (c.tokens == 0) return;
  const int threads = std::min(1024, (h / 4 + 31) / 32 * 32);
  LaunchPdl(CombineKernel, dim3(c.tokens), dim3(threads), 0, stream, y, c.ids, c.local, c.num_experts, c.top_k, h,
            c.out);
}

// ---- the bf16 wire (CudaMoeRunner::RunBf16): core/bf16.h's rounding, the host's bytes --------
__global__ void Bf16ToF32Kernel(const uint16_t* __restrict__ x, float* __restrict__ y, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    y[i] = __uint_as_float(uint32_t(x[i]) << 16);
  }
}

__global__ void F32ToBf16Kernel(const float* __restrict__ x, uint16_t* __restrict__ y, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    y[i] = Bf16BitsOf(__float_as_uint(x[i]));
  }
}

namespace {
int WireBlocks(size_t n) { return int(std::min<size_t>((n + 255) / 256, 4096)); }
}  // namespace

void LaunchBf16ToF32(const uint16_t* x, float* y, size_t n, cudaStream_t stream) {
  if (n > 0) Bf16ToF32Kernel<<<WireBlocks(n), 256, 0, stream>>>(x, y, n);
}

void LaunchF32ToBf16(const float* x, uint16_t* y, size_t n, cudaStream_t stream) {
  if (n > 0) F32ToBf16Kernel<<<WireBlocks(n), 256, 0, stream>>>(x, y, n);
}

// ---- the grouped GEMM ------------------------------------------------------------------------
template <int MT, int NW, int WN, int WK, bool kGateUp>
__global__ void __launch_bounds__(32 * WN * WK) MoeGemmKernel(const GemmArgs p) {
  constexpr int kRed = WK > 1 ? (WK - 1) * WN * MT * NW * 4 * 32 : 1;
  __shared__ float red[kRed];
  const int tile = blockIdx.y;
  const int valid_tiles = __ldg(p.ntiles);
  const int e = __ldg(p.tiles + 3 * tile), row0 = __ldg(p.tiles + 3 * tile + 1),
            rows = __ldg(p.tiles + 3 * tile + 2);
  if (tile >= valid_tiles) return;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int wn = warp % WN, wk = warp / WN;
  const int nt0 = (blockIdx.x * WN + wn) * NW;
  const int nt_total = p.n >> 3;
  const int64_t rg_bytes = int64_t(4) * p.kp;  // 8 rows * kp/2
  const uint8_t* qe = p.q + int64_t(e) * nt_total * rg_bytes;
  const uint8_t* se = p.sc + int64_t(e) * nt_total * p.chunks * 32;

  float acc[MT][NW][4];
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int i = 0; i < NW; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[m][i][j] = 0.f;

  const uint16_t* arow[MT][2];
  bool aval[MT][2];
#pragma unroll
  for (int m = 0; m < MT; ++m)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int lr = m * 16 + g + 8 * h;
      aval[m][h] = lr < rows;
      arow[m][h] = p.a + int64_t(row0 + (lr < rows ? lr : 0)) * p.kp;
    }
  bool nval[NW];
#pragma unroll
  for (int i = 0; i < NW; ++i) nval[i] = nt0 + i < nt_total;

  auto load_b = [&](int c, uint4 (&bq)[NW], uint32_t (&bs)[NW]) {
#pragma unroll
    for (int i = 0; i < NW; ++i) {
      if (nval[i]) {
        bq[i] = LdStream16(qe + (nt0 + i) * rg_bytes + int64_t(c) * 512 + lane * 16);
        bs[i] = __ldg(reinterpret_cast<const uint32_t*>(se + (int64_t(nt0 + i) * p.chunks + c) * 32 + g * 4));
      } else {
        bq[i] = make_uint4(0, 0, 0, 0);
        bs[i] = 0x7F7F7F7Fu;
      }
    }
  };
  auto compute = [&](int c, const uint4 (&bq)[NW], const uint32_t (&bs)[NW]) {
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      uint4 alo[MT], ahi[MT];
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        const int off = c * 128 + t * 32 + 8 * b;
        alo[m] = aval[m][0] ? __ldg(reinterpret_cast<const uint4*>(arow[m][0] + off)) : make_uint4(0, 0, 0, 0);
        ahi[m] = aval[m][1] ? __ldg(reinterpret_cast<const uint4*>(arow[m][1] + off)) : make_uint4(0, 0, 0, 0);
      }
      uint32_t w[NW], sc[NW];
#pragma unroll
      for (int i = 0; i < NW; ++i) {
        w[i] = b == 0 ? bq[i].x : b == 1 ? bq[i].y : b == 2 ? bq[i].z : bq[i].w;
        sc[i] = ScaleBf16x2((bs[i] >> (8 * b)) & 0xFFu);
      }
      BlockMma<MT, NW>(acc, alo, ahi, w, sc);
    }
  };

  int c = wk;
  uint4 bq[NW];
  uint32_t bs[NW];
  if (c < p.nfull) load_b(c, bq, bs);
  for (; c < p.nfull; c += WK) {
    uint4 nq[NW];
    uint32_t ns[NW];
    const bool more = c + WK < p.nfull;
    if (more) load_b(c + WK, nq, ns);
    compute(c, bq, bs);
    if (more) {
#pragma unroll
      for (int i = 0; i < NW; ++i) { bq[i] = nq[i]; bs[i] = ns[i]; }
    }
  }
  // The 64-wide tail chunk goes to the warp that would have had chunk index nfull.
  if (p.chunks > p.nfull && wk == p.nfull % WK) {
    const int ct = p.nfull;
    uint2 tq[NW];
    uint32_t ts[NW];
#pragma unroll
    for (int i = 0; i < NW; ++i) {
      if (nval[i]) {
        tq[i] = LdStream8(qe + (nt0 + i) * rg_bytes + int64_t(ct) * 512 + lane * 8);
        ts[i] = __ldg(reinterpret_cast<const uint32_t*>(se + (int64_t(nt0 + i) * p.chunks + ct) * 32 + g * 4));
      } else {
        tq[i] = make_uint2(0, 0);
        ts[i] = 0x7F7F7F7Fu;
      }
    }
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      uint4 alo[MT], ahi[MT];
#pragma unroll
      for (int m = 0; m < MT; ++m) {
        const int off = ct * 128 + t * 16 + 8 * b;
        alo[m] = aval[m][0] ? __ldg(reinterpret_cast<const uint4*>(arow[m][0] + off)) : make_uint4(0, 0, 0, 0);
        ahi[m] = aval[m][1] ? __ldg(reinterpret_cast<const uint4*>(arow[m][1] + off)) : make_uint4(0, 0, 0, 0);
      }
      uint32_t w[NW], sc[NW];
#pragma unroll
      for (int i = 0; i < NW; ++i) {
        w[i] = b == 0 ? tq[i].x : tq[i].y;
        sc[i] = ScaleBf16x2((ts[i] >> (8 * b)) & 0xFFu);
      }
      BlockMma<MT, NW>(acc, alo, ahi, w, sc);
    }
  }

  if constexpr (WK > 1) {
    constexpr int kRegs = MT * NW * 4;
    if (wk > 0) {
      float* dst = red + ((wk - 1) * WN + wn) * kRegs * 32;
#pragma unroll
      for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int i = 0; i < NW; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) dst[((m * NW + i) * 4 + j) * 32 + lane] = acc[m][i][j];
    }
    __syncthreads();
    if (wk > 0) return;
    for (int kk = 1; kk < WK; ++kk) {
      const float* src = red + ((kk - 1) * WN + wn) * kRegs * 32;
#pragma unroll
      for (int m = 0; m < MT; ++m)
#pragma unroll
        for (int i = 0; i < NW; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) acc[m][i][j] += src[((m * NW + i) * 4 + j) * 32 + lane];
    }
  }

  const float* be = p.bias + int64_t(e) * p.n;
#pragma unroll
  for (int i = 0; i < NW; ++i) {
    if (!nval[i]) continue;
    const int n = (nt0 + i) * 8 + 2 * t;
    const float b0 = be[n], b1 = be[n + 1];
#pragma unroll
    for (int m = 0; m < MT; ++m)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int lr = m * 16 + g + 8 * h;
        if (lr >= rows) continue;
        const float v0 = acc[m][i][2 * h] + b0, v1 = acc[m][i][2 * h + 1] + b1;
        if constexpr (kGateUp) {
          const float act = GptOssSwiglu(v0, v1, p.alpha, p.limit);
          p.act[int64_t(row0 + lr) * p.kp_out + PermIndex(n >> 1, p.nfull_out)] = F2Bf16(act);
        } else {
          const int pair = p.sorted[row0 + lr];
          const float w = p.route_w[pair];
          *reinterpret_cast<float2*>(p.y + int64_t(pair) * p.n + n) = make_float2(w * v0, w * v1);
        }
      }
  }
}

template <int MT, int NW, int WN, int WK>
void LaunchGemmT(const GemmArgs& a, bool gate_up, int max_tiles, cudaStream_t stream) {
  const int rows_per_cta = 8 * NW * WN;
  dim3 grid((a.n + rows_per_cta - 1) / rows_per_cta, max_tiles);
  if (gate_up) {
    MoeGemmKernel<MT, NW, WN, WK, true><<<grid, 32 * WN * WK, 0, stream>>>(a);
  } else {
    MoeGemmKernel<MT, NW, WN, WK, false><<<grid, 32 * WN * WK, 0, stream>>>(a);
  }
}

// Programmatic dependent launch is an sm_90 feature (the portable kernels' PdlWait is empty below).
bool PdlEnabled() { return CurrentVariant().pdl && Device().cc >= 90; }

std::string PhaseRow(const char* name, std::vector<double> v) {
  std::sort(v.begin(), v.end());
  char line[200];
  std::snprintf(line, sizeof(line), "| %s | %.2f | %.2f | %.2f |\n", name, v.front(), v[v.size() / 2], v.back());
  return line;
}

bool EvictFirst() { return CurrentVariant().evict_first; }

const DeviceLimits& Device() {
  static const DeviceLimits l = [] {
    DeviceLimits r;
    int dev = 0, khz = 0, bits = 0;
    cudaGetDevice(&dev);
    cudaDeviceGetAttribute(&r.sms, cudaDevAttrMultiProcessorCount, dev);
    cudaDeviceGetAttribute(&r.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    int major = 0, minor = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    r.cc = 10 * major + minor;
    r.sms = std::max(r.sms, 1);
    if (cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, dev) == cudaSuccess &&
        cudaDeviceGetAttribute(&bits, cudaDevAttrGlobalMemoryBusWidth, dev) == cudaSuccess) {
      r.peak_gbps = 2.0 * khz * 1e3 * (bits / 8) * 1e-9;
    }
    return r;
  }();
  return l;
}

unsigned PersistentGrid(int64_t items) {
  return unsigned(std::max<int64_t>(1, std::min<int64_t>(Device().sms, items)));
}

int LaunchGemm(const GemmArgs& a, bool gate_up, int path, bool one_mul, int max_tiles, cudaStream_t stream) {
  if (max_tiles <= 0) return 0;
  // The tiles were cut for the wgmma paths' row counts: no other kernel may take them. The ss
  // paths and the ldg configurations are the lab's.
  const Variant& v = CurrentVariant();
  if (path >= kPathSs || (path >= kPathWgmma && PathBm(path) >= 32 && v.wgmma_cfg >= 3)) {
    return v.lab_gemm != nullptr ? v.lab_gemm(a, gate_up, path, one_mul, max_tiles, stream) : -1;
  }
  if (path >= kPathWgmma) return LaunchWgmmaGemm(a, gate_up, one_mul, PathBm(path), max_tiles, stream);
  switch (path) {
    case kPathDecode: LaunchDecodeGemm(a, gate_up, false, one_mul, max_tiles, stream); break;
    case kPathDecode16: LaunchDecodeGemm(a, gate_up, true, one_mul, max_tiles, stream); break;
    case kPathMid:       // 32-row tiles: the lab's kst kernel (Variant::lab_kst), else as 24
    case kPathDecode24: {  // 24: the K-streamed TMA kernel unless another decode kernel is pinned,
                           // else (or where it cannot run) the mma.sync kernel of 32-row tiles
      if (const int slice = KstSlice();
          slice >= 0 && LaunchDecodeKst(a, gate_up, one_mul, slice, PathBm(path), max_tiles, stream) == 0) {
        break;
      }
      LaunchGemmT<2, 2, 2, 4>(a, gate_up, max_tiles, stream);
      break;
    }
    default: LaunchGemmT<4, 4, 8, 1>(a, gate_up, max_tiles, stream); break;  // prefill
  }
  return 0;
}

}  // namespace mxserve::kernels::cuda::internal
