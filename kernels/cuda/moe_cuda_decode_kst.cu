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
// tiles of 8, 16, 24 or 32 token rows) slice by slice, then writes its rows x tokens
// (moe_cuda_decode_kst.cuh). The default decode kernel for every tile size above 4 token-slots
// (moe_cuda_decode.cu). Built here: the configurations kAuto runs at 8, 16 and 24 rows (the
// comments above LaunchKst8 say why these); the others (MXSERVE_PLAN's kst_cfg, pinned slices at
// 16 rows and more, the 32-row mid path) are kernels/cuda/lab's (lab/decode_kst_variants.cu).
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

int KstCfg() { return CurrentVariant().kst_cfg; }

// 8-row tiles: two CTAs of 12 consumer warps per SM (x2), more warps to hide the decode's
// latency: 0.0913 / 0.3434 / 0.4652 against 0.0942 / 0.3492 / 0.4812 ms at 4 / 32 / 64 tokens,
// within 1.5 % at 8, 16 and 128 (gpt-oss-120b, medians of three). Where that cannot run (two
// stages of it do not fit) one CTA of 12, in 4-chunk slices while three stages fit (fewer,
// larger copies), else 2-chunk; a pinned slice (MXSERVE_PLAN decode=kst|kst4) takes those too.
int LaunchKst8(const GemmArgs& a, bool gate_up, bool one_mul, int slice_chunks, int max_tiles, cudaStream_t stream) {
  const int cfg = KstCfg();
  if ((slice_chunks == 0 && cfg == 0) || cfg == 2) {
    if (const int r = LaunchKstOcc<1, 12, 2>(a, gate_up, one_mul, max_tiles, stream); r != -1) return r;
  }
  if (slice_chunks == 0) slice_chunks = Stages<4, 1, 12>(8, a.rows) >= 3 ? 4 : 2;
  return slice_chunks == 4 ? LaunchKstCs<4, 1, 1, 12>(a, gate_up, one_mul, max_tiles, stream)
                           : LaunchKstCs<2, 1, 1, 12>(a, gate_up, one_mul, max_tiles, stream);
}

// 16-row tiles: 15 consumer warps of two m16 tiles (119-125 registers; half the shared-memory
// reads of activations per weight) in 3-chunk slices, two stages: 0.675 against 0.707 ms at 256
// tokens, 0.963 against 1.006 at 512 against one m16 tile per warp (gpt-oss-120b; 8-row tiles
// lose with it: 0.288 against 0.274 at 16 tokens); against 12 warps (kst_cfg=w12), ms, medians of
// three alternating rounds: 0.600 / 0.650 (gpt-oss-120b, 256 tokens), 0.861 / 0.928 (512), 2.180 /
// 2.370 (K3-like, 256), 3.150 / 3.303 (Kimi-K2-like, 512); 2-9 % faster at every count timed.
// With 16 consumer warps or two CTAs per SM it spills; one m16 tile per warp there was slower
// (0.70 / 0.68 / 0.72 ms at 256 tokens for w16 / x2 / x2w8, `kstcfg` step). Also measured: 2-chunk
// slices (0.692), one m16 tile per warp in 3-chunk slices (0.771), 6 warps with 4-chunk slices
// (0.959), 8 warps with 3-chunk slices (0.787).
// 24-row tiles likewise, with 11 consumer warps: at 12 (13 warps, so 4 on one scheduler: at most
// 128 registers) the down kernels spill; 11 need 146-168 registers. decode24 at 11 against 12
// warps, ms (`paths` step): 0.809 against 0.814 (gpt-oss-120b, 512 tokens), 2.015 against 2.046
// (K3-like, 256), 3.903 against 4.039 (Kimi-K2-like, 768). 14 warps with the epilogue operands
// loaded after the slices (kst_cfg=w14) ran 0.95-1.02x the 11 warps' time.

// Whether the lab's configurations take this launch (MXSERVE_PLAN's kst_cfg, a pinned slice at
// 16 rows and more, 32-row tiles): they decline (kLabDeclines) the settings that end on one of
// the configurations here.
bool LabKstAsked(int slice_chunks, int tile_rows) {
  return KstCfg() != 0 || tile_rows == 32 || (slice_chunks != 0 && tile_rows != 8);
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
  if (LabKstAsked(slice_chunks, tile_rows)) {
    const LabKstFn lab = CurrentVariant().lab_kst;
    const int r = lab != nullptr ? lab(a, gate_up, one_mul, slice_chunks, tile_rows, max_tiles, stream) : -1;
    if (r != kLabDeclines) return r;
  }
  switch (tile_rows) {
    case 8: return LaunchKst8(a, gate_up, one_mul, slice_chunks, max_tiles, stream);
    case 16: return LaunchKstCs<3, 2, 2, 15>(a, gate_up, one_mul, max_tiles, stream);
    case 24: return LaunchKstCs<3, 3, 2, 11>(a, gate_up, one_mul, max_tiles, stream);
    default: return -1;
  }
}

}  // namespace mxserve::kernels::cuda::internal
