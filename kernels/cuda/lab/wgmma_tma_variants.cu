// The TMA-fed register-A wgmma GEMM (../moe_cuda_wgmma_tma.cuh) in the forms kAuto never runs:
// 8-row tiles (path=wgmma8), one CTA per item at the heights kAuto runs persistent and persistent
// at those it runs one CTA per item (MXSERVE_PLAN wgmma_cfg=tma|persist), launched through
// Variant::lab_wgmma.
#include <cuda_runtime.h>

#include "kernels/cuda/lab/lab_kernels.h"
#include "kernels/cuda/moe_cuda_wgmma_tma.cuh"

namespace mxserve::kernels::cuda::internal {

// The consumer warpgroups per tile height are LaunchTH's (moe_cuda_wgmma_tma.cuh): 6 at 8-48
// rows, 5 at 64, 4 at 96 and 128 (3 persistent at 128), 3 at 192, 2 at 256.
int LaunchWgmmaTmaLab(const GemmArgs& a, bool gate_up, bool one_mul, int bn, int max_tiles, bool persist,
                      cudaStream_t stream) {
  if (a.rows <= 0) return 0;
  CUtensorMap tmap;
  if (const int r = EncodeActivationSlabs(a, bn, &tmap); r != 0) return r;
  if (persist) {
    switch (bn) {
      case 8: return LaunchTBn<8, 6, true>(tmap, a, gate_up, one_mul, max_tiles, stream);
      case 32: return LaunchTBn<32, 6, true>(tmap, a, gate_up, one_mul, max_tiles, stream);
      case 40: return LaunchTBn<40, 6, true>(tmap, a, gate_up, one_mul, max_tiles, stream);
      case 48: return LaunchTBn<48, 6, true>(tmap, a, gate_up, one_mul, max_tiles, stream);
      case 128: return LaunchTBn<128, 3, true>(tmap, a, gate_up, one_mul, max_tiles, stream);
      default: return -1;  // kAuto's (moe_cuda_wgmma_tma.cu), or not a wgmma height
    }
  }
  switch (bn) {
    case 8: return LaunchTBn<8, 6, false>(tmap, a, gate_up, one_mul, max_tiles, stream);
    case 16: return LaunchTBn<16, 6, false>(tmap, a, gate_up, one_mul, max_tiles, stream);
    case 24: return LaunchTBn<24, 6, false>(tmap, a, gate_up, one_mul, max_tiles, stream);
    case 64: return LaunchTBn<64, 5, false>(tmap, a, gate_up, one_mul, max_tiles, stream);
    case 96: return LaunchTBn<96, 4, false>(tmap, a, gate_up, one_mul, max_tiles, stream);
    case 192: return LaunchTBn<192, 3, false>(tmap, a, gate_up, one_mul, max_tiles, stream);
    case 256: return LaunchTBn<256, 2, false>(tmap, a, gate_up, one_mul, max_tiles, stream);
    default: return -1;
  }
}

}  // namespace mxserve::kernels::cuda::internal
