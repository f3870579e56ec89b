// The K-streamed decode kernels' shared pieces (moe_cuda_decode_kst.cu: one GEMM per launch;
// moe_cuda_decode_kst_pair.cu: a layer's gate_up and down GEMMs in one launch): the stage
// geometry, one chunk's multiply, the producer's activation-row copies and a consumer warp's
// work on one item; the one-GEMM kernel (DecodeKstKernel) and its launchers, templates that
// moe_cuda_decode_kst.cu instantiates at kAuto's configurations and kernels/cuda/lab at the others.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/moe_cuda_gemm.cuh"
#include "kernels/cuda/moe_cuda_launch.h"
#include "kernels/cuda/moe_cuda_tma.h"
#include "kernels/cuda/moe_cuda_variant.h"

namespace mxserve::kernels::cuda::internal {
namespace {

constexpr int kMaxS = 8;            // stages

struct KsGeom {
  int w_bytes, s_bytes, a_stride, stage_bytes;
};
// kW consumer warps, each owning kMt m16 tiles of an item: an item is 2 * kMt * kW n8 groups.
template <int kCs, int kMt, int kW>
__host__ __device__ inline KsGeom MakeKsGeom(int rows) {
  constexpr int kGroups = 2 * kMt * kW;
  KsGeom g;
  g.w_bytes = kGroups * kCs * 512;  // [group][kCs chunks x 512]
  g.s_bytes = kGroups * kCs * 32;   // [group][kCs chunks x 32]
  g.a_stride = kCs * 256 + 16;      // a token row's slice, +16: rows start 4 banks apart
  // Stages start 128-byte aligned (TMA destinations).
  g.stage_bytes = (g.w_bytes + g.s_bytes + rows * g.a_stride + 127) / 128 * 128;
  return g;
}

// Local chunk lc of a slice for the warp's kMt m16 tiles (groups wa[m], wa[m] + wboff[m]; scales
// likewise) and kNb token groups (arow[j]: the lane's token row of group j in the slice, permuted
// order). Each k32 block's activations are loaded once and feed all kMt tiles.
template <bool kOneMul, bool kTail, int kNb, int kMt>
__device__ __forceinline__ void SliceChunkMma(float (&acc)[kMt][kNb][2][4], const uint8_t* const (&wa)[kMt],
                                              const int (&wboff)[kMt], const uint8_t* const (&sa)[kMt],
                                              const int (&sboff)[kMt], const bool (&ok)[kMt],
                                              const uint8_t* const (&arow)[kNb], int lc, int lane) {
  uint4 qa[kMt], qb[kMt];
  uint32_t swa[kMt], swb[kMt];
#pragma unroll
  for (int m = 0; m < kMt; ++m) {
    if constexpr (!kTail) {
      qa[m] = *reinterpret_cast<const uint4*>(wa[m] + lc * 512 + lane * 16);
      qb[m] = *reinterpret_cast<const uint4*>(wa[m] + wboff[m] + lc * 512 + lane * 16);
    } else {  // the 64-wide tail chunk: 8 bytes per lane, two blocks
      const uint2 a2 = *reinterpret_cast<const uint2*>(wa[m] + lc * 512 + lane * 8);
      const uint2 b2 = *reinterpret_cast<const uint2*>(wa[m] + wboff[m] + lc * 512 + lane * 8);
      qa[m] = make_uint4(a2.x, a2.y, 0u, 0u);
      qb[m] = make_uint4(b2.x, b2.y, 0u, 0u);
    }
    swa[m] = *reinterpret_cast<const uint32_t*>(sa[m] + lc * 32);
    swb[m] = *reinterpret_cast<const uint32_t*>(sa[m] + sboff[m] + lc * 32);
  }
  auto word = [](const uint4& q, int b) { return b == 0 ? q.x : b == 1 ? q.y : b == 2 ? q.z : q.w; };
#pragma unroll
  for (int b = 0; b < (kTail ? 2 : 4); ++b) {
    uint4 xb[kNb];
#pragma unroll
    for (int j = 0; j < kNb; ++j) {
      xb[j] = *reinterpret_cast<const uint4*>(arow[j] + lc * 256 + (lane & 3) * (kTail ? 32 : 64) + 16 * b);
    }
#pragma unroll
    for (int m = 0; m < kMt; ++m) {
      if (m == 0 || ok[m]) BlockMmaA<kOneMul, kNb>(acc[m], word(qa[m], b), word(qb[m], b), swa[m], swb[m], b, xb);
    }
  }
}

// The most dynamic shared memory each of kCb CTAs on an SM may have on sm_90 (228 KB per SM,
// 1 KB of it reserved per CTA) less the static mbarriers.
template <int kCb>
constexpr int KsSmemLimit() { return (228 << 10) / kCb - 2048; }
static_assert(KsSmemLimit<1>() <= (227 << 10));

// Stages of kCb CTAs per SM at tiles of tile_rows rows (min(tile_rows, rows) of them used), at
// most kMaxS.
template <int kCs, int kMt, int kW, int kCb = 1>
int Stages(int tile_rows, int rows) {
  return std::min(kMaxS, KsSmemLimit<kCb>() /
                             MakeKsGeom<kCs, kMt, kW>(std::min(tile_rows, std::max(1, rows))).stage_bytes);
}

// Bytes of one activation row in slice s of a GEMM with `chunks` chunks of which `nfull` are full:
// its full chunks' 256 each, the tail chunk's 128.
template <int kCs>
__device__ __forceinline__ int KstRowBytes(int s, int chunks, int nfull) {
  const int c0 = s * kCs, c1 = min(chunks, c0 + kCs);
  return max(0, min(c1, nfull) - c0) * 256 + (c1 > nfull ? 128 : 0);
}

// The producer: slice s's weights and scales of the item whose first group row is `grow` into
// the stage at `base`, completing on `bar`. (Under an L2 evict_first policy, as the fused kernel's
// copies, they were 1-2 % slower at 16-128 tokens on an H200.)
template <int kCs>
__device__ __forceinline__ void KstLoadWeights(const KsGeom& geo, uint8_t* base, const CUtensorMap* wmap,
                                               const CUtensorMap* smap, uint64_t* bar, int s, int grow) {
  TmaLoad2d(base, wmap, bar, s * kCs * 64, grow);
  TmaLoad2d(base + geo.w_bytes, smap, bar, s * kCs * 4, grow);
}

// The producer: the activation rows of slice s of `tile` into the stage at `base` (its weights and
// scales first), completing on `bar`.
template <int kCs, int kRows>
__device__ __forceinline__ void KstLoadRows(const GemmArgs& p, const KsGeom& geo, uint8_t* base, uint64_t* bar,
                                            int tile, int s) {
  const int row0 = __ldg(p.tiles + 3 * tile + 1), n_rows = min(__ldg(p.tiles + 3 * tile + 2), kRows);
  const int c0 = s * kCs, ab = KstRowBytes<kCs>(s, p.chunks, p.nfull);
  uint8_t* dst = base + geo.w_bytes + geo.s_bytes;
  for (int r = 0; r < n_rows; ++r) {
    BulkCopyG2S(dst + r * geo.a_stride, reinterpret_cast<const uint8_t*>(p.a + int64_t(row0 + r) * p.kp) + c0 * 256,
                ab, bar);
  }
}

// Consumer warp `warp` on item `it` of `tile` (groups it * kGroups + 2 * (kMt * warp + m) and the
// next, m < kMt; all token groups of the tile): its `slices` slices from the ring (stage, phase:
// the next stage use's stage and parity, advanced here), then its rows x tokens stored.
template <bool kGateUp, bool kOneMul, int kCs, int kNb, int kMt, int kW, bool kLate>
__device__ __forceinline__ void KstConsumeItem(const GemmArgs& p, const KsGeom& geo, uint8_t* smem, uint64_t* full,
                                               uint64_t* empty, int S, int tile, int it, int slices, int warp,
                                               int lane, int& stage, uint32_t& phase) {
  constexpr int kRows = 8 * kNb, kGroups = 2 * kMt * kW;
  const int g = lane >> 2, t = lane & 3;
  const int nt_total = p.n >> 3, nfull = p.nfull, chunks = p.chunks;
  const int e = __ldg(p.tiles + 3 * tile), row0 = __ldg(p.tiles + 3 * tile + 1);
  const int rows = min(__ldg(p.tiles + 3 * tile + 2), kRows);
  int ga[kMt], fa[kMt], fb[kMt], woff[kMt], wboff[kMt], soff[kMt], sboff[kMt];
  bool a_ok[kMt], b_ok[kMt];
  float ba[kMt], bb[kMt];
#pragma unroll
  for (int m = 0; m < kMt; ++m) {
    const int lg = 2 * (kMt * warp + m);  // the m16 tile's first group within the item
    ga[m] = it * kGroups + lg;
    a_ok[m] = ga[m] < nt_total;
    b_ok[m] = ga[m] + 1 < nt_total;
    // Epilogue operands, requested now: they arrive while the slices are multiplied (kLate:
    // after them, below, so that their registers go to more warps).
    fa[m] = ga[m] * 8 + g;
    fb[m] = fa[m] + 8;
    if constexpr (!kLate) {
      ba[m] = a_ok[m] ? __ldg(p.bias + int64_t(e) * p.n + fa[m]) : 0.f;
      bb[m] = b_ok[m] ? __ldg(p.bias + int64_t(e) * p.n + fb[m]) : 0.f;
    }
    // Group B past the layer's rows (odd n / 8) reads group A's bytes: its mma rows are
    // independent and never stored.
    woff[m] = lg * (kCs * 512);
    soff[m] = lg * (kCs * 32) + g * 4;
    wboff[m] = b_ok[m] ? kCs * 512 : 0;
    sboff[m] = b_ok[m] ? kCs * 32 : 0;
  }
  int pair0[kNb], pair1[kNb];
  float w0[kNb], w1[kNb];
#pragma unroll
  for (int j = 0; j < kNb; ++j) {
    const int t0 = 8 * j + 2 * t, t1 = t0 + 1;
    pair0[j] = pair1[j] = 0;
    w0[j] = w1[j] = 0.f;
    if constexpr (!kGateUp && !kLate) {
      if (t0 < rows) pair0[j] = __ldg(p.sorted + row0 + t0);
      if (t1 < rows) pair1[j] = __ldg(p.sorted + row0 + t1);
      if (t0 < rows) w0[j] = __ldg(p.route_w + pair0[j]);
      if (t1 < rows) w1[j] = __ldg(p.route_w + pair1[j]);
    }
  }
  float acc[kMt][kNb][2][4];
#pragma unroll
  for (int m = 0; m < kMt; ++m)
#pragma unroll
    for (int j = 0; j < kNb; ++j)
#pragma unroll
      for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int k = 0; k < 4; ++k) acc[m][j][i][k] = 0.f;
  // Tokens past the tile read token 0: their mma columns are independent and never stored.
  int aoff[kNb];
#pragma unroll
  for (int j = 0; j < kNb; ++j) aoff[j] = (8 * j + g < rows ? 8 * j + g : 0) * geo.a_stride;
  for (int s = 0; s < slices; ++s) {
    MbarWait(&full[stage], phase);
    if (a_ok[0]) {
      const uint8_t* base = smem + stage * geo.stage_bytes;
      const uint8_t* wa[kMt];
      const uint8_t* sa[kMt];
#pragma unroll
      for (int m = 0; m < kMt; ++m) {
        wa[m] = base + woff[m];
        sa[m] = base + geo.w_bytes + soff[m];
      }
      const uint8_t* arow[kNb];
#pragma unroll
      for (int j = 0; j < kNb; ++j) arow[j] = base + geo.w_bytes + geo.s_bytes + aoff[j];
      const int c0 = s * kCs, nf = max(0, min(min(chunks, c0 + kCs), nfull) - c0);
      if (nf == kCs) {
        // Every slice but the last: its chunks without a branch each, so that their shared-memory
        // addresses are the slice's bases plus immediates.
#pragma unroll
        for (int lc = 0; lc < kCs; ++lc) {
          SliceChunkMma<kOneMul, false, kNb, kMt>(acc, wa, wboff, sa, sboff, a_ok, arow, lc, lane);
        }
      } else {
#pragma unroll
        for (int lc = 0; lc < kCs; ++lc) {
          if (lc < nf) {
            SliceChunkMma<kOneMul, false, kNb, kMt>(acc, wa, wboff, sa, sboff, a_ok, arow, lc, lane);
          } else if (c0 + lc < chunks) {
            SliceChunkMma<kOneMul, true, kNb, kMt>(acc, wa, wboff, sa, sboff, a_ok, arow, lc, lane);
          }
        }
      }
    }
    // Every lane releases the stage after its own reads (empty counts threads): ordered for
    // racecheck too, which does not see a __syncwarp then lane 0's arrival as ordering the other
    // lanes' reads before the producer's refill (tests/gpu/racecheck_pattern.cu, ring).
    MbarArrive(&empty[stage]);
    if (++stage == S) stage = 0, phase ^= 1u;
  }
  // The loads above, after the slices (kLate). Written out again rather than shared through a
  // lambda: with one, ptxas emitted other code for 41 of the 84 existing kernels
  // (scripts/cubin-diff.py), which the kernels' timings do not cover.
  if constexpr (kLate) {
#pragma unroll
    for (int m = 0; m < kMt; ++m) {
      ba[m] = a_ok[m] ? __ldg(p.bias + int64_t(e) * p.n + fa[m]) : 0.f;
      bb[m] = b_ok[m] ? __ldg(p.bias + int64_t(e) * p.n + fb[m]) : 0.f;
    }
#pragma unroll
    for (int j = 0; j < kNb; ++j) {  // the down epilogue's slots and routing weights
      const int t0 = 8 * j + 2 * t, t1 = t0 + 1;
      if constexpr (!kGateUp) {
        if (t0 < rows) pair0[j] = __ldg(p.sorted + row0 + t0);
        if (t1 < rows) pair1[j] = __ldg(p.sorted + row0 + t1);
        if (t0 < rows) w0[j] = __ldg(p.route_w + pair0[j]);
        if (t1 < rows) w1[j] = __ldg(p.route_w + pair1[j]);
      }
    }
  }
#pragma unroll
  for (int m = 0; m < kMt; ++m) {
    if (!a_ok[m]) break;  // warp-uniform; later tiles are past the layer too
#pragma unroll
    for (int j = 0; j < kNb; ++j) {
      if (8 * j >= rows) break;  // warp-uniform
      float v[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) v[k] = acc[m][j][0][k] + acc[m][j][1][k];
      StoreTileA<kGateUp>(p, v, ba[m], bb[m], fa[m], fb[m], b_ok[m], g, t,
                          TileSlotsA{row0 + 8 * j, rows - 8 * j, pair0[j], pair1[j], w0[j], w1[j]});
    }
  }
}


// wmap: 2D [all groups][4 * kp / 8] of u64 (box kCs * 64 x kGroups); smap: [all groups][chunks * 4]
// of u64 (box kCs * 4 x kGroups). Boxes past a row's end (the tail slice) arrive zero-filled.
// Tiles of up to 8 * kNb token rows (the routing's bm); each consumer warp owns kMt m16 tiles
// (2 * kMt groups) of an item.
template <bool kGateUp, bool kOneMul, int kCs, int kNb, int kMt, int kW, int kCb, bool kLate>
__global__ void __launch_bounds__(32 * kW + 32, kCb) DecodeKstKernel(const __grid_constant__ CUtensorMap wmap,
                                                                      const __grid_constant__ CUtensorMap smap,
                                                                      const GemmArgs p, int S) {
  constexpr int kRows = 8 * kNb, kGroups = 2 * kMt * kW;
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ uint64_t full[kMaxS], empty[kMaxS];
  // Only the producer reads what the kernel before wrote (a): with early_weights it waits below,
  // after asking for its first stages' weights.
  if (!p.early_weights) PdlWait();
  const int nvalid = __ldg(p.ntiles);
  PdlLaunchDependents();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int nt_total = p.n >> 3;
  const int per_tile = (nt_total + kGroups - 1) / kGroups;
  const int64_t items = int64_t(nvalid) * per_tile;
  const int it_lo = int(items * blockIdx.x / gridDim.x), it_hi = int(items * (blockIdx.x + 1) / gridDim.x);
  const int nfull = p.nfull, chunks = p.chunks;
  const int slices = (chunks + kCs - 1) / kCs;
  const KsGeom geo = MakeKsGeom<kCs, kMt, kW>(min(kRows, max(1, p.rows)));
  if (threadIdx.x == 0) {
    for (int i = 0; i < S; ++i) {
      MbarInit(&full[i], 1);
      MbarInit(&empty[i], 32 * kW);  // every consumer lane
    }
    FenceMbarInit();
  }
  __syncthreads();  // the only CTA-wide barrier: from here on warps meet only through mbarriers

  if (warp == kW) {  // the producer (one thread): (item, slice) -> stage once the stage is empty
    if (lane != 0) return;
    auto row_bytes = [&](int s) { return KstRowBytes<kCs>(s, chunks, nfull); };
    auto rows_of = [&](int stage, int tile, int s) {
      KstLoadRows<kCs, kRows>(p, geo, smem + stage * geo.stage_bytes, &full[stage], tile, s);
    };
    // early_weights: the first S stage uses get their weights and scales now, their activation
    // rows once the kernel before has finished (at use S, or after the last use if fewer). Use u
    // (< S) is slice u % slices of item it_lo + u / slices, in stage u.
    const int uses = (it_hi - it_lo) * slices, early = p.early_weights ? min(S, uses) : 0;
    auto rows_of_early = [&] {
      PdlWait();
      for (int u = 0; u < early; ++u) rows_of(u, (it_lo + u / slices) / per_tile, u % slices);
    };
    // Stage use q goes to stage q % S, its (q / S)-th use: both kept as counters (S is a kernel
    // argument: a division per slice cost ~30 instructions in the consumers' loop).
    int q = 0, stage = 0;
    uint32_t phase = 0;  // (q / S) & 1
    for (int item = it_lo; item < it_hi; ++item) {
      const int tile = item / per_tile, gi0 = (item - tile * per_tile) * kGroups;
      const int e = __ldg(p.tiles + 3 * tile);
      const int n_rows = min(__ldg(p.tiles + 3 * tile + 2), kRows);
      const int grow = e * nt_total + gi0;  // the item's first group row in the tensor maps
      for (int s = 0; s < slices; ++s, ++q) {
        if (q == early && early > 0) rows_of_early();
        if (q >= S) MbarWait(&empty[stage], phase ^ 1u);  // the consumers released use q - S
        uint8_t* base = smem + stage * geo.stage_bytes;
        MbarExpectTx(&full[stage], geo.w_bytes + geo.s_bytes + n_rows * row_bytes(s));
        KstLoadWeights<kCs>(geo, base, &wmap, &smap, &full[stage], s, grow);
        if (q >= early) rows_of(stage, tile, s);
        if (++stage == S) stage = 0, phase ^= 1u;
      }
    }
    if (q == early && early > 0) rows_of_early();  // fewer uses than stages
    return;
  }

  // Consumer warp `warp`: groups 2 * (kMt * warp + m) and the next, m < kMt, of each item, all token
  // groups of its tile.
  int stage = 0;        // stage use q's stage (q % S) and parity ((q / S) & 1), as the producer
  uint32_t phase = 0;
  for (int item = it_lo; item < it_hi; ++item) {
    const int tile = item / per_tile;
    KstConsumeItem<kGateUp, kOneMul, kCs, kNb, kMt, kW, kLate>(p, geo, smem, full, empty, S, tile,
                                                               item - tile * per_tile, slices, warp, lane, stage,
                                                               phase);
  }
}

template <bool kOneMul, int kCs, int kNb, int kMt, int kW, int kCb, bool kLate>
void LaunchKstT(const CUtensorMap& wmap, const CUtensorMap& smap, const GemmArgs& a, bool gate_up, int max_tiles,
                int stages, size_t smem, cudaStream_t stream) {
  RaiseSmemOnce<DecodeKstKernel<true, kOneMul, kCs, kNb, kMt, kW, kCb, kLate>>(KsSmemLimit<kCb>());
  RaiseSmemOnce<DecodeKstKernel<false, kOneMul, kCs, kNb, kMt, kW, kCb, kLate>>(KsSmemLimit<kCb>());
  constexpr int kGroups = 2 * kMt * kW;
  const int64_t items = int64_t(max_tiles) * ((a.n / 8 + kGroups - 1) / kGroups);
  // Variant::kst_grid_pm: the grid below cut to a per-mille of itself (how much the
  // item-granular split's tail costs: items per CTA round up either way).
  const int grid_pm = CurrentVariant().kst_grid_pm;
  // kCb CTAs per SM: the persistent grid times kCb, never more CTAs than items, at least one.
  const int64_t full = std::min<int64_t>(items, int64_t(PersistentGrid(items)) * kCb);
  const unsigned grid = unsigned(std::max<int64_t>(1, full * grid_pm / 1000));
  auto k = gate_up ? DecodeKstKernel<true, kOneMul, kCs, kNb, kMt, kW, kCb, kLate>
                   : DecodeKstKernel<false, kOneMul, kCs, kNb, kMt, kW, kCb, kLate>;
  LaunchPdl(k, dim3(grid), dim3(32 * kW + 32), smem, stream, wmap, smap, a, stages);
}

template <int kCs, int kNb, int kMt, int kW, int kCb = 1, bool kLate = false>
int LaunchKstCs(const GemmArgs& a, bool gate_up, bool one_mul, int max_tiles, cudaStream_t stream) {
  constexpr int kGroups = 2 * kMt * kW;
  const KsGeom geo = MakeKsGeom<kCs, kMt, kW>(std::min(8 * kNb, std::max(1, a.rows)));
  const int stages = Stages<kCs, kMt, kW, kCb>(8 * kNb, a.rows);
  if (stages < 2 || TensorMapEncoder() == nullptr) return -1;
  CUtensorMap wmap, smap;
  if (CUresult r = EncodeWeightMaps(a, kCs, kGroups, &wmap, &smap); r != CUDA_SUCCESS) return int(r);
  const size_t smem = size_t(stages) * geo.stage_bytes;
  if (one_mul) LaunchKstT<true, kCs, kNb, kMt, kW, kCb, kLate>(wmap, smap, a, gate_up, max_tiles, stages, smem, stream);
  else LaunchKstT<false, kCs, kNb, kMt, kW, kCb, kLate>(wmap, smap, a, gate_up, max_tiles, stages, smem, stream);
  return 0;
}

// An occupancy variant (MXSERVE_PLAN's kst_cfg, benchmarks): kW consumer warps, kCb CTAs per
// SM, one m16 tile per warp (two spill within the smaller register budgets); 4-chunk slices where
// three stages fit, else 3-chunk (8-row tiles); 16-row tiles in 3-chunk slices.
template <int kNb, int kW, int kCb>
int LaunchKstOcc(const GemmArgs& a, bool gate_up, bool one_mul, int max_tiles, cudaStream_t stream) {
  if constexpr (kNb == 2) {
    return LaunchKstCs<3, kNb, 1, kW, kCb>(a, gate_up, one_mul, max_tiles, stream);
  } else {
    return Stages<4, 1, kW, kCb>(8 * kNb, a.rows) >= 3
               ? LaunchKstCs<4, kNb, 1, kW, kCb>(a, gate_up, one_mul, max_tiles, stream)
               : LaunchKstCs<3, kNb, 1, kW, kCb>(a, gate_up, one_mul, max_tiles, stream);
  }
}

}  // namespace
}  // namespace mxserve::kernels::cuda::internal
