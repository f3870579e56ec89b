// The one-launch layer (../moe_cuda_fused.cuh) in the configurations FusedBuilt names other than
// kAuto's 16 warps x 4 K parts (MXSERVE_PLAN fused=<parts>x<slots>[w<warps>]), launched through
// Variant::lab_fused, and the stamps those write.
#include <cuda_runtime.h>

#include <string>

#include "kernels/cuda/lab/lab_kernels.h"
#include "kernels/cuda/moe_cuda_fused.cuh"

namespace mxserve::kernels::cuda::internal {

cudaError_t LaunchFusedLab(const GemmArgs& g, const GemmArgs& d, const SelfRoute& sr, const FusedPlan& pl,
                           bool one_mul, cudaStream_t stream) {
  switch (pl.warps * 100 + pl.parts) {
    case 1603: return LaunchFusedWP<16, 3>(g, d, sr, pl, one_mul, stream);
    case 1606: return LaunchFusedWP<16, 6>(g, d, sr, pl, one_mul, stream);
    case 1608: return LaunchFusedWP<16, 8>(g, d, sr, pl, one_mul, stream);
    case 2006: return LaunchFusedWP<20, 6>(g, d, sr, pl, one_mul, stream);
    case 2404: return LaunchFusedWP<24, 4>(g, d, sr, pl, one_mul, stream);
    case 2406: return LaunchFusedWP<24, 6>(g, d, sr, pl, one_mul, stream);
    case 2408: return LaunchFusedWP<24, 8>(g, d, sr, pl, one_mul, stream);
    case 3206: return LaunchFusedWP<32, 6>(g, d, sr, pl, one_mul, stream);
    default: return cudaErrorNotSupported;  // kAuto's (moe_cuda_fused.cu) or not built
  }
}

std::string FusedStampsReportLab(const int (&plan)[4]) { return FusedStampsTable(plan); }

}  // namespace mxserve::kernels::cuda::internal
