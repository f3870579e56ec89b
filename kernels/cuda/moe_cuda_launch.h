// Launchers of the CUDA MoE kernels (moe_cuda_kernels.cu), private to kernels/cuda.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mxserve::kernels::cuda::internal {

struct GemmArgs;

struct RoutingArgs {
  const int32_t* ids;
  const int32_t* local;
  const float* x;
  int tokens, top_k, num_experts, nh, bm, hidden, kp_h;
  int32_t* meta;    // counts [nh], offsets [nh+1], cursors [nh], ntiles [1]
  int32_t* tiles;
  int32_t* sorted;
  uint16_t* a;
};

void LaunchSwizzle(const uint8_t* src_q, const uint8_t* src_s, uint8_t* dst_q, uint8_t* dst_s,
                   int n, int k, int kp, cudaStream_t stream);
void LaunchRouting(const RoutingArgs& r, cudaStream_t stream);
// path: 0 decode (16-row tiles, 8-way split K), 1 mid (32), 2 prefill (64).
int PathBm(int path);
void LaunchGemm(const GemmArgs& a, bool gate_up, int path, int max_tiles, cudaStream_t stream);
void LaunchCombine(const float* y, const int32_t* ids, const int32_t* local, int num_experts,
                   int tokens, int top_k, int h, float* out, cudaStream_t stream);

}  // namespace mxserve::kernels::cuda::internal
