// The driver's tensor-map encoder and the wgmma kernels' token-operand map (moe_cuda_tma.h).
#include <cuda.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <cstdint>

#include "kernels/cuda/moe_cuda_gemm_args.h"
#include "kernels/cuda/moe_cuda_launch.h"
#include "kernels/cuda/moe_cuda_tma.h"

namespace mxserve::kernels::cuda::internal {

PFN_cuTensorMapEncodeTiled_v12000 TensorMapEncoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    // TMA is an sm_90 unit, and every kernel that reads a tensor map is built for sm_90a only: on an
    // older card none is launched (their launchers see no encoder and decline).
    if (Device().cc < 90) return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) !=
            cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      f = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

bool WgmmaAvailable() { return TensorMapEncoder() != nullptr; }

int EncodeActivationSlabs(const GemmArgs& a, int box_rows, CUtensorMap* map) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = TensorMapEncoder();
  if (encode == nullptr) return -1;
  const cuuint64_t dims[2] = {cuuint64_t(a.kp), cuuint64_t(a.rows)};
  const cuuint64_t strides[1] = {cuuint64_t(a.kp) * 2};
  const cuuint32_t box[2] = {64, cuuint32_t(box_rows)};
  const cuuint32_t estr[2] = {1, 1};
  const CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<uint16_t*>(a.a), dims, strides,
                            box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? 0 : int(r);
}

}  // namespace mxserve::kernels::cuda::internal
