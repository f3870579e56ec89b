// The decode-regime grouped GEMM, K-streamed through TMA ("kst"): weights as the mma A operand
// like moe_cuda_decode_wa.cu, but each consumer warp owns 16 weight rows over the whole of K, so
// there are no partial sums to meet and no per-item protocol between warps.
//
// Why: ncu's per-instruction samples of the wa kernel (gpt-oss-120b gate_up, 64 tokens) put 34
// issued instructions per mma, of which ~16-20 are the multiply itself: with K split six ways a
// warp multiplies only ~4 chunks per item, and the item's fixed costs (the stage wait, the
// partial-sum slot, the counter, the epilogue) are the rest. A first K-streamed kernel (commit
// ded0977) issued 56 bulk copies per 2-chunk slice (one per group's weights, scales, token row)
// and ran at half the wa kernel's speed; here a slice's weights and scales are one TMA box each
// (24 group rows x the slice's bytes, from 2D tensor maps over all groups of all experts).
//
// Work split: a persistent CTA per SM walks a contiguous range of items (tile, kWarps * 2
// consecutive n8 groups = 192 weight rows). Each item is streamed through S shared-memory stages
// in K slices of kCs chunks (weights, scales and the tile's activation rows of that slice); a
// producer thread fills a stage as soon as every consumer warp has released it. Consumer warp w
// multiplies groups 2w, 2w + 1 of the item (the m16 A operand, decoded into its registers) with
// the tokens (the n8 B operand) slice by slice, then writes its 16 rows x 8 tokens. Not the
// default yet: MXSERVE_CUDA_MOE_DECODE=kst (kCs = 2) or kst4 (kCs = 4) selects it.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/moe_cuda_gemm.cuh"
#include "kernels/cuda/moe_cuda_launch.h"
#include "kernels/cuda/moe_cuda_tma.h"

namespace mxserve::kernels::cuda::internal {
namespace {

constexpr int kWarps = 12;          // consumer warps; an item is 2 * kWarps n8 groups
constexpr int kGroups = 2 * kWarps;
constexpr int kMaxS = 8;            // stages

struct KsGeom {
  int w_bytes, s_bytes, a_stride, stage_bytes;
};
template <int kCs>
__host__ __device__ inline KsGeom MakeKsGeom(int rows) {
  KsGeom g;
  g.w_bytes = kGroups * kCs * 512;  // [group][kCs chunks x 512]
  g.s_bytes = kGroups * kCs * 32;   // [group][kCs chunks x 32]
  g.a_stride = kCs * 256 + 16;      // a token row's slice, +16: rows start 4 banks apart
  // Stages start 128-byte aligned (TMA destinations).
  g.stage_bytes = (g.w_bytes + g.s_bytes + rows * g.a_stride + 127) / 128 * 128;
  return g;
}

// Local chunk lc of a slice: its activations (the lane's token row of the slice, arow, in the
// permuted order), then ChunkMmaA.
template <bool kOneMul, bool kTail>
__device__ __forceinline__ void SliceChunkMma(float (&acc)[2][4], const uint8_t* wa, const uint8_t* wb,
                                              const uint8_t* sa, const uint8_t* sb, const uint8_t* arow,
                                              int lc, int lane) {
  const uint8_t* xr = arow + lc * 256 + (lane & 3) * (kTail ? 32 : 64);
  uint4 x[4];
#pragma unroll
  for (int b = 0; b < (kTail ? 2 : 4); ++b) x[b] = *reinterpret_cast<const uint4*>(xr + 16 * b);
  ChunkMmaA<kOneMul, kTail>(acc, wa, wb, sa, sb, x, lc, lane);
}

// wmap: 2D [all groups][4 * kp / 8] of u64 (box kCs * 64 x kGroups); smap: [all groups][chunks * 4]
// of u64 (box kCs * 4 x kGroups). Boxes past a row's end (the tail slice) arrive zero-filled.
template <bool kGateUp, bool kOneMul, int kCs>
__global__ void __launch_bounds__(32 * kWarps + 32, 1) DecodeKstKernel(const __grid_constant__ CUtensorMap wmap,
                                                                      const __grid_constant__ CUtensorMap smap,
                                                                      const GemmArgs p, int S) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ uint64_t full[kMaxS], empty[kMaxS];
  PdlWait();
  const int nvalid = __ldg(p.ntiles);
  PdlLaunchDependents();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int nt_total = p.n >> 3;
  const int per_tile = (nt_total + kGroups - 1) / kGroups;
  const int64_t items = int64_t(nvalid) * per_tile;
  const int it_lo = int(items * blockIdx.x / gridDim.x), it_hi = int(items * (blockIdx.x + 1) / gridDim.x);
  const int nfull = p.nfull, chunks = p.chunks;
  const int slices = (chunks + kCs - 1) / kCs;
  const KsGeom geo = MakeKsGeom<kCs>(min(8, max(1, p.rows)));
  if (threadIdx.x == 0) {
    for (int i = 0; i < S; ++i) {
      MbarInit(&full[i], 1);
      MbarInit(&empty[i], kWarps);
    }
    FenceMbarInit();
  }
  __syncthreads();  // the only CTA-wide barrier: from here on warps meet only through mbarriers

  if (warp == kWarps) {  // the producer (one thread): (item, slice) -> stage once the stage is empty
    if (lane != 0) return;
    int q = 0;  // stage uses so far
    for (int item = it_lo; item < it_hi; ++item) {
      const int tile = item / per_tile, gi0 = (item - tile * per_tile) * kGroups;
      const int e = __ldg(p.tiles + 3 * tile), row0 = __ldg(p.tiles + 3 * tile + 1);
      const int n_rows = min(__ldg(p.tiles + 3 * tile + 2), 8);
      const int grow = e * nt_total + gi0;  // the item's first group row in the tensor maps
      for (int s = 0; s < slices; ++s, ++q) {
        const int stage = q % S;
        if (q >= S) MbarWait(&empty[stage], ((q / S) - 1) & 1);
        const int c0 = s * kCs, c1 = min(chunks, c0 + kCs);
        const int nf = max(0, min(c1, nfull) - c0);  // full chunks in the slice
        const int ab = nf * 256 + (c1 > nfull ? 128 : 0);
        uint8_t* base = smem + stage * geo.stage_bytes;
        MbarExpectTx(&full[stage], geo.w_bytes + geo.s_bytes + n_rows * ab);
        TmaLoad2d(base, &wmap, &full[stage], c0 * 64, grow);
        TmaLoad2d(base + geo.w_bytes, &smap, &full[stage], c0 * 4, grow);
        for (int r = 0; r < n_rows; ++r) {
          BulkCopyG2S(base + geo.w_bytes + geo.s_bytes + r * geo.a_stride,
                      reinterpret_cast<const uint8_t*>(p.a + int64_t(row0 + r) * p.kp) + c0 * 256, ab,
                      &full[stage]);
        }
      }
    }
    return;
  }

  // Consumer warp `warp`: groups 2 * warp, 2 * warp + 1 of each item.
  int q = 0;
  for (int item = it_lo; item < it_hi; ++item) {
    const int tile = item / per_tile;
    const int ga = (item - tile * per_tile) * kGroups + 2 * warp, gb = ga + 1;
    const bool a_ok = ga < nt_total, b_ok = gb < nt_total;
    const int e = __ldg(p.tiles + 3 * tile), row0 = __ldg(p.tiles + 3 * tile + 1);
    const int rows = min(__ldg(p.tiles + 3 * tile + 2), 8);
    // Epilogue operands, requested now: they arrive while the slices are multiplied.
    const int t0 = 2 * t, t1 = 2 * t + 1;
    const int fa = ga * 8 + g, fb = gb * 8 + g;
    const float ba = a_ok ? __ldg(p.bias + int64_t(e) * p.n + fa) : 0.f;
    const float bb = b_ok ? __ldg(p.bias + int64_t(e) * p.n + fb) : 0.f;
    int pair0 = 0, pair1 = 0;
    float w0 = 0.f, w1 = 0.f;
    if constexpr (!kGateUp) {
      if (t0 < rows) pair0 = __ldg(p.sorted + row0 + t0);
      if (t1 < rows) pair1 = __ldg(p.sorted + row0 + t1);
      if (t0 < rows) w0 = __ldg(p.route_w + pair0);
      if (t1 < rows) w1 = __ldg(p.route_w + pair1);
    }
    float acc[2][4];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int k = 0; k < 4; ++k) acc[i][k] = 0.f;
    // Group B past the layer's rows (odd n / 8) reads group A's bytes, tokens past the tile read
    // token 0: their mma rows / columns are independent and never stored.
    const int woff = (2 * warp) * (kCs * 512), soff = (2 * warp) * (kCs * 32) + g * 4;
    const int wboff = b_ok ? kCs * 512 : 0, sboff = b_ok ? kCs * 32 : 0;
    const int aoff = (g < rows ? g : 0) * geo.a_stride;
    for (int s = 0; s < slices; ++s, ++q) {
      const int stage = q % S;
      MbarWait(&full[stage], (q / S) & 1);
      if (a_ok) {
        const uint8_t* base = smem + stage * geo.stage_bytes;
        const uint8_t* wa = base + woff;
        const uint8_t* sa = base + geo.w_bytes + soff;
        const uint8_t* arow = base + geo.w_bytes + geo.s_bytes + aoff;
        const int c0 = s * kCs, nf = max(0, min(min(chunks, c0 + kCs), nfull) - c0);
#pragma unroll
        for (int lc = 0; lc < kCs; ++lc) {
          if (lc < nf) SliceChunkMma<kOneMul, false>(acc, wa, wa + wboff, sa, sa + sboff, arow, lc, lane);
          else if (c0 + lc < chunks) SliceChunkMma<kOneMul, true>(acc, wa, wa + wboff, sa, sa + sboff, arow, lc, lane);
        }
      }
      __syncwarp();
      if (lane == 0) MbarArrive(&empty[stage]);
    }
    if (!a_ok) continue;
    float v[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) v[k] = acc[0][k] + acc[1][k];
    StoreTileA<kGateUp>(p, v, ba, bb, fa, fb, b_ok, g, t, TileSlotsA{row0, rows, pair0, pair1, w0, w1});
  }
}

constexpr int kKsSmemLimit = 200 << 10;

template <bool kOneMul, int kCs>
void LaunchKstT(const CUtensorMap& wmap, const CUtensorMap& smap, const GemmArgs& a, bool gate_up, int max_tiles,
                int stages, size_t smem, cudaStream_t stream) {
  static const bool raised = [] {
    cudaFuncSetAttribute(DecodeKstKernel<true, kOneMul, kCs>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         kKsSmemLimit);
    cudaFuncSetAttribute(DecodeKstKernel<false, kOneMul, kCs>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         kKsSmemLimit);
    return true;
  }();
  (void)raised;
  const unsigned grid = PersistentGrid(int64_t(max_tiles) * ((a.n / 8 + kGroups - 1) / kGroups));
  auto k = gate_up ? DecodeKstKernel<true, kOneMul, kCs> : DecodeKstKernel<false, kOneMul, kCs>;
  LaunchPdl(k, dim3(grid), dim3(32 * kWarps + 32), smem, stream, wmap, smap, a, stages);
}

// A 2D u64 tensor map [rows][row_bytes / 8] with boxes of box_bytes x kGroups rows.
CUresult EncodeRows(CUtensorMap* map, const uint8_t* base, int64_t rows, int64_t row_bytes, int box_bytes) {
  const cuuint64_t dims[2] = {cuuint64_t(row_bytes / 8), cuuint64_t(rows)};
  const cuuint64_t strides[1] = {cuuint64_t(row_bytes)};
  const cuuint32_t box[2] = {cuuint32_t(box_bytes / 8), cuuint32_t(kGroups)};
  const cuuint32_t estr[2] = {1, 1};
  return TensorMapEncoder()(map, CU_TENSOR_MAP_DATA_TYPE_UINT64, 2, const_cast<uint8_t*>(base), dims, strides, box,
                            estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
}

template <int kCs>
int LaunchKstCs(const GemmArgs& a, bool gate_up, bool one_mul, int max_tiles, int held, cudaStream_t stream) {
  const KsGeom geo = MakeKsGeom<kCs>(std::min(8, std::max(1, a.rows)));
  const int stages = std::min(kMaxS, kKsSmemLimit / geo.stage_bytes);
  if (stages < 2 || TensorMapEncoder() == nullptr) return -1;
  const int64_t groups = int64_t(held) * (a.n / 8);
  CUtensorMap wmap, smap;
  if (CUresult r = EncodeRows(&wmap, a.q, groups, int64_t(4) * a.kp, kCs * 512); r != CUDA_SUCCESS) return int(r);
  if (CUresult r = EncodeRows(&smap, a.sc, groups, int64_t(a.chunks) * 32, kCs * 32); r != CUDA_SUCCESS) {
    return int(r);
  }
  const size_t smem = size_t(stages) * geo.stage_bytes;
  if (one_mul) LaunchKstT<true, kCs>(wmap, smap, a, gate_up, max_tiles, stages, smem, stream);
  else LaunchKstT<false, kCs>(wmap, smap, a, gate_up, max_tiles, stages, smem, stream);
  return 0;
}

}  // namespace

int LaunchDecodeKst(const GemmArgs& a, bool gate_up, bool one_mul, int slice_chunks, int max_tiles, int held,
                    cudaStream_t stream) {
  return slice_chunks == 4 ? LaunchKstCs<4>(a, gate_up, one_mul, max_tiles, held, stream)
                           : LaunchKstCs<2>(a, gate_up, one_mul, max_tiles, held, stream);
}

}  // namespace mxserve::kernels::cuda::internal
