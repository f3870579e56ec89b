// Helpers shared by the dense kernels' .cu files: bf16 bits <-> float on the device, and how a
// launcher reports arguments it cannot run.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace mxserve::kernels::cuda::dense::detail {

__device__ __forceinline__ float Bf16Float(uint16_t b) {
  return __uint_as_float(static_cast<uint32_t>(b) << 16);
}

__device__ __forceinline__ uint16_t Bf16Rn(float x) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}

// Leaves cudaErrorInvalidConfiguration for cudaGetLastError (the header's contract: launch
// errors surface there): launchers call it on arguments outside what their kernels handle
// instead of running on them.
void ReportBadArguments(cudaStream_t stream);

}  // namespace mxserve::kernels::cuda::dense::detail
