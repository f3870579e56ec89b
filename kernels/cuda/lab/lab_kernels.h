// The GEMMs only kernels/cuda/lab builds, launched through Variant::lab_gemm.
#pragma once

#include <cuda_runtime.h>

namespace mxserve::kernels::cuda::internal {

struct GemmArgs;

// The register-A wgmma GEMM with the weights loaded by each warp one chunk ahead (wgmma_ldg.cu)
// in configuration `config` (Variant::wgmma_cfg 3 ... 10) at tile height bn (32 ... 256): as
// LaunchWgmmaGemm (-1 for another bn or config).
int LaunchWgmmaLdgGemm(const GemmArgs& a, bool gate_up, bool one_mul, int bn, int max_tiles, int config,
                       cudaStream_t stream);
// The weights-through-shared-memory wgmma GEMM (wgmma_ss.cu; tiles of `tokens` = 128, 192 or 64
// token rows): as LaunchWgmmaGemm.
int LaunchWgmmaSsGemm(const GemmArgs& a, bool gate_up, bool one_mul, int tokens, int max_tiles, cudaStream_t stream);

}  // namespace mxserve::kernels::cuda::internal
