// The decode-regime grouped GEMM, K-streamed through TMA ("kst"): weights as the mma A operand
// (decoded into its registers; the tokens are the n8 B operand) like the weights-as-A ("wa")
// kernel it replaced, but each consumer warp
// owns its weight rows over the whole of K, so there are no partial sums to meet and no per-item
// protocol between warps.
//
// Why: ncu's per-instruction samples of the wa kernel (gpt-oss-120b gate_up, 64 tokens) put 34
// issued instructions per mma, of which ~16-20 are the multiply itself: with K split six ways a
// warp multiplies only ~4 chunks per item, and the item's fixed costs (the stage wait, the
// partial-sum slot, the counter, the epilogue) are the rest. A first K-streamed kernel (commit
// ded0977) issued 56 bulk copies per 2-chunk slice (one per group's weights, scales, token row)
// and ran at half the wa kernel's speed; here a slice's weights and scales are one TMA box each
// (24 group rows x the slice's bytes, from 2D tensor maps over all groups of all experts).
//
// Work split: a persistent CTA per SM walks a contiguous range of items (tile, 2 * kMt * kW
// consecutive n8 groups: 192 weight rows with 8-row tiles (kMt 1, kW 12), 480 with 16-row tiles
// (kMt 2, kW 15), 352 with 24- and 32-row tiles (kMt 2, kW 11)). Each item is streamed through S shared-memory stages in K slices of kCs chunks
// (weights, scales and the tile's activation rows of that slice); a producer thread fills a stage
// as soon as every consumer warp has released it. Consumer warp w multiplies its kMt m16 tiles of
// the item (the A operand, decoded into its registers) with the tile's tokens (kNb n8 B operands:
// tiles of 8, 16, 24 or 32 token rows) slice by slice, then writes its rows x tokens. The default
// decode kernel for every tile size above 4 token-slots (moe_cuda_decode.cu): 8-row tiles in
// 4-chunk slices, 16-, 24- and 32-row tiles in 3-chunk slices (LaunchKstNb says why).
// MXSERVE_PLAN decode=kst pins 2-chunk slices and kst4 4-chunk slices with one m16 tile per
// warp (benchmarks).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/moe_cuda_decode_kst.cuh"
#include "kernels/cuda/moe_cuda_gemm.cuh"
#include "kernels/cuda/moe_cuda_launch.h"
#include "kernels/cuda/moe_cuda_variant.h"
#include "kernels/cuda/moe_cuda_tma.h"

namespace mxserve::kernels::cuda::internal {
namespace {

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

// MXSERVE_PLAN's kst_cfg (benchmarks): w16 (16 consumer warps), x2 (two CTAs per SM of 12),
// x2w8 (two of 8), x1 (one CTA of 12 at 8-row tiles too), w12 (16-row tiles at 12 consumer
// warps), w14 (24-row tiles at 14 consumer warps); unset: the defaults in LaunchKstNb. Two CTAs of
// 13 or 14 (LaunchKstOcc<kNb, 13 or 14, 2>) lost to x2 at 16-128 tokens.
int KstCfg() { return CurrentVariant().kst_cfg; }

template <int kNb>
int LaunchKstNb(const GemmArgs& a, bool gate_up, bool one_mul, int slice_chunks, int max_tiles,
                cudaStream_t stream) {
  if constexpr (kNb <= 2) {
    switch (KstCfg()) {
      case 1: return LaunchKstOcc<kNb, 16, 1>(a, gate_up, one_mul, max_tiles, stream);
      case 2: return LaunchKstOcc<kNb, 12, 2>(a, gate_up, one_mul, max_tiles, stream);
      case 3: return LaunchKstOcc<kNb, 8, 2>(a, gate_up, one_mul, max_tiles, stream);
      default: break;
    }
  }
  // More consumer warps under the 128-register cap of 13-16 warps per CTA. 16-row tiles: 15 warps
  // of two m16 tiles (119-125 registers), the default below. 24 rows: 14 (w14; two 3-chunk stages
  // of 15 do not fit) with the epilogue operands loaded after the slices (kLate), which brings them
  // to 128 with at most 8 bytes spilled; not the default: 0.95-1.02x the 11 warps' time (medians of
  // three alternating rounds; 32 rows would spill 60-76 bytes: not built).
  if constexpr (kNb == 3) {
    if (slice_chunks == 0 && KstCfg() == 6) {
      return LaunchKstCs<3, kNb, 2, 14, 1, true>(a, gate_up, one_mul, max_tiles, stream);
    }
  }
  // 8-row tiles: two CTAs of 12 consumer warps per SM (x2), more warps to hide the decode's
  // latency: 0.0913 / 0.3434 / 0.4652 against 0.0942 / 0.3492 / 0.4812 ms at 4 / 32 / 64 tokens,
  // within 1.5 % at 8, 16 and 128 (gpt-oss-120b, medians of three).
  if constexpr (kNb == 1) {
    if (slice_chunks == 0 && KstCfg() == 0) {
      if (const int r = LaunchKstOcc<kNb, 12, 2>(a, gate_up, one_mul, max_tiles, stream); r != -1) return r;
    }
  }
  // 16-row tiles: two m16 tiles per warp (half the shared-memory reads of activations per
  // weight) in 3-chunk slices, two stages: 0.675 against 0.707 ms at 256 tokens, 0.963 against
  // 1.006 at 512 (gpt-oss-120b; 8-row tiles lose with it: 0.288 against 0.274 at 16 tokens). With 16
  // consumer warps or two CTAs per SM it spills; one m16 tile per warp there was slower (0.70 /
  // 0.68 / 0.72 ms at 256 tokens for w16 / x2 / x2w8, `kstcfg` step).
  // Also measured: 2-chunk slices (0.692), one m16 tile per warp in 3-chunk
  // slices (0.771), 6 warps with 4-chunk slices (0.959), 8 warps with 3-chunk slices (0.787).
  // 24- and 32-row tiles likewise, with 11 consumer warps: at 12 (13 warps, so 4 on one
  // scheduler: at most 128 registers) the down kernels spill; 11 need 146-168 registers.
  // decode24 / mid at 11 against 12 warps, ms (`paths` step):
  // 0.809 / 0.902 against 0.814 / 1.066 (gpt-oss-120b, 512 tokens), 2.015 / 2.214 against
  // 2.046 / 2.558 (K3-like, 256), 3.903 / 4.212 against 4.039 / 4.856 (Kimi-K2-like, 768). With one
  // m16 tile per warp mid lost to the 32-row wgmma tiles everywhere (gpt-oss-120b at 512 tokens:
  // 1.263 against 0.904 ms).
  if constexpr (kNb >= 3) {
    if (slice_chunks == 0) return LaunchKstCs<3, kNb, 2, 11>(a, gate_up, one_mul, max_tiles, stream);
  }
  // 16-row tiles at 15 consumer warps against 12 (w12), ms, medians of three alternating rounds:
  // 0.600 / 0.650 (gpt-oss-120b, 256 tokens), 0.861 / 0.928 (512),
  // 2.180 / 2.370 (K3-like, 256), 3.150 / 3.303 (Kimi-K2-like, 512); 2-9 % faster at every count
  // timed (gpt-oss-120b 64-512, K3-like 128-256, Kimi-K2-like 512-768).
  if constexpr (kNb == 2) {
    if (slice_chunks == 0) {
      return KstCfg() == 5 ? LaunchKstCs<3, kNb, 2, 12>(a, gate_up, one_mul, max_tiles, stream)
                           : LaunchKstCs<3, kNb, 2, 15>(a, gate_up, one_mul, max_tiles, stream);
    }
  }
  // Auto: 4-chunk slices while three stages fit (fewer, larger copies), else 2-chunk.
  if (slice_chunks == 0) slice_chunks = Stages<4, 1, 12>(8 * kNb, a.rows) >= 3 ? 4 : 2;
  return slice_chunks == 4 ? LaunchKstCs<4, kNb, 1, 12>(a, gate_up, one_mul, max_tiles, stream)
                           : LaunchKstCs<2, kNb, 1, 12>(a, gate_up, one_mul, max_tiles, stream);
}

}  // namespace

bool KstDefault() { return KstCfg() == 0 && KstSlice() == 0; }

// A 2D u64 tensor map [rows][row_bytes / 8] with boxes of box_bytes x box_rows rows.
CUresult EncodeRows(CUtensorMap* map, const uint8_t* base, int64_t rows, int64_t row_bytes, int box_bytes,
                    int box_rows) {
  const cuuint64_t dims[2] = {cuuint64_t(row_bytes / 8), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(row_bytes)};
  const cuuint32_t box[2] = {cuuint32_t(box_bytes / 8), cuuint32_t(box_rows)};
  const cuuint32_t estr[2] = {1, 1};
  // L2 promotion of 64 B: 256 B was 0.2-1.5 % slower at 16-128 tokens of gpt-oss-120b and no
  // faster elsewhere.
  // MXSERVE_PLAN l2_promotion=256|none|128 (benchmarks) picks another.
  constexpr CUtensorMapL2promotion kP[] = {CU_TENSOR_MAP_L2_PROMOTION_L2_64B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                           CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_128B};
  const CUtensorMapL2promotion promo = kP[CurrentVariant().l2_promotion & 3];
  return TensorMapEncoder()(map, CU_TENSOR_MAP_DATA_TYPE_UINT64, 2, const_cast<uint8_t*>(base), dims, strides, box,
                            estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE, promo,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

CUresult EncodeWeightMaps(const GemmArgs& a, int box_chunks, int box_groups, CUtensorMap* wmap, CUtensorMap* smap) {
  const int64_t groups = int64_t(a.held) * (a.n / 8);
  if (CUresult r = EncodeRows(wmap, a.q, groups, int64_t(4) * a.kp, box_chunks * 512, box_groups); r != CUDA_SUCCESS) {
    return r;
  }
  return EncodeRows(smap, a.sc, groups, int64_t(a.chunks) * 32, box_chunks * 32, box_groups);
}

int LaunchDecodeKst(const GemmArgs& a, bool gate_up, bool one_mul, int slice_chunks, int tile_rows, int max_tiles,
                    cudaStream_t stream) {
  switch (tile_rows) {
    case 8: return LaunchKstNb<1>(a, gate_up, one_mul, slice_chunks, max_tiles, stream);
    case 16: return LaunchKstNb<2>(a, gate_up, one_mul, slice_chunks, max_tiles, stream);
    case 24: return LaunchKstNb<3>(a, gate_up, one_mul, slice_chunks, max_tiles, stream);
    case 32: return LaunchKstNb<4>(a, gate_up, one_mul, slice_chunks, max_tiles, stream);
    default: return -1;
  }
}

}  // namespace mxserve::kernels::cuda::internal
