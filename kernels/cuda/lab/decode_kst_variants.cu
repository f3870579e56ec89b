// The K-streamed decode kernel (../moe_cuda_decode_kst.cuh) in the configurations kAuto never
// runs: MXSERVE_PLAN's kst_cfg occupancy variants, pinned slices (decode=kst|kst4) at 16 rows and
// more, and 32-row tiles (the mid path), launched through Variant::lab_kst.
#include <cuda_runtime.h>

#include "kernels/cuda/lab/lab_kernels.h"
#include "kernels/cuda/moe_cuda_decode_kst.cuh"
#include "kernels/cuda/moe_cuda_variant.h"

namespace mxserve::kernels::cuda::internal {
namespace {

// A pinned slice of 2 or 4 chunks with one m16 tile per warp, 12 consumer warps.
template <int kNb>
int LaunchKstSliced(const GemmArgs& a, bool gate_up, bool one_mul, int slice_chunks, int max_tiles,
                    cudaStream_t stream) {
  return slice_chunks == 4 ? LaunchKstCs<4, kNb, 1, 12>(a, gate_up, one_mul, max_tiles, stream)
                           : LaunchKstCs<2, kNb, 1, 12>(a, gate_up, one_mul, max_tiles, stream);
}

}  // namespace

// kst_cfg: 1 w16 (16 consumer warps), 2 x2 (two CTAs per SM of 12: the 8-row default), 3 x2w8
// (two of 8), 4 x1 (one CTA of 12 at 8-row tiles too), 5 w12 (16-row tiles at 12 consumer warps),
// 6 w14 (24-row tiles at 14 consumer warps, the epilogue operands loaded after the slices). Two
// CTAs of 13 or 14 (LaunchKstOcc<kNb, 13 or 14, 2>) lost to x2 at 16-128 tokens. 32-row tiles
// (mid): 11 consumer warps of two m16 tiles in 3-chunk slices, as 24 rows; at 12 warps 0.902
// against 1.066 ms (gpt-oss-120b, 512 tokens), 2.214 against 2.558 (K3-like, 256), 4.212 against
// 4.856 (Kimi-K2-like, 768); with one m16 tile per warp it lost to the 32-row wgmma tiles
// everywhere (gpt-oss-120b at 512 tokens: 1.263 against 0.904 ms).
int LaunchDecodeKstLab(const GemmArgs& a, bool gate_up, bool one_mul, int slice_chunks, int tile_rows,
                       int max_tiles, cudaStream_t stream) {
  const int cfg = CurrentVariant().kst_cfg;
  switch (tile_rows) {
    case 8:
      if (cfg == 1) return LaunchKstOcc<1, 16, 1>(a, gate_up, one_mul, max_tiles, stream);
      if (cfg == 3) return LaunchKstOcc<1, 8, 2>(a, gate_up, one_mul, max_tiles, stream);
      return kLabDeclines;
    case 16:
      switch (cfg) {
        case 1: return LaunchKstOcc<2, 16, 1>(a, gate_up, one_mul, max_tiles, stream);
        case 2: return LaunchKstOcc<2, 12, 2>(a, gate_up, one_mul, max_tiles, stream);
        case 3: return LaunchKstOcc<2, 8, 2>(a, gate_up, one_mul, max_tiles, stream);
        default: break;
      }
      if (slice_chunks != 0) return LaunchKstSliced<2>(a, gate_up, one_mul, slice_chunks, max_tiles, stream);
      return cfg == 5 ? LaunchKstCs<3, 2, 2, 12>(a, gate_up, one_mul, max_tiles, stream) : kLabDeclines;
    case 24:
      if (slice_chunks != 0) return LaunchKstSliced<3>(a, gate_up, one_mul, slice_chunks, max_tiles, stream);
      return cfg == 6 ? LaunchKstCs<3, 3, 2, 14, 1, true>(a, gate_up, one_mul, max_tiles, stream) : kLabDeclines;
    case 32:
      if (slice_chunks != 0) return LaunchKstSliced<4>(a, gate_up, one_mul, slice_chunks, max_tiles, stream);
      return LaunchKstCs<3, 4, 2, 11>(a, gate_up, one_mul, max_tiles, stream);
    default: return -1;
  }
}

}  // namespace mxserve::kernels::cuda::internal
