// ArgmaxRows (dense_cuda.h): one CTA per row, each thread the best of a strided slice, then a
// warp-shuffle and a shared-memory reduction. Ties keep the lower id, as Sampler::Argmax.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/dense/dense_cuda.h"

namespace mxserve::kernels::cuda::dense {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ void Better(float& v, int& i, float ov, int oi) {
  if (ov > v || (ov == v && oi < i)) {
    v = ov;
    i = oi;
  }
}

__global__ void ArgmaxKernel(const float* logits, int vocab, int32_t* out) {
  const float* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  float v = -INFINITY;
  int i = 0x7fffffff;
  for (int j = threadIdx.x; j < vocab; j += kThreads) Better(v, i, row[j], j);
  for (int o = 16; o > 0; o >>= 1) {
    Better(v, i, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, i, o));
  }
  __shared__ float sv[kThreads / 32];
  __shared__ int si[kThreads / 32];
  if (threadIdx.x % 32 == 0) {
    sv[threadIdx.x / 32] = v;
    si[threadIdx.x / 32] = i;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; ++w) Better(v, i, sv[w], si[w]);
    // A row of NaNs or -inf only: id 0, as a scan that never finds a larger value.
    out[blockIdx.x] = i == 0x7fffffff ? 0 : i;
  }
}

}  // namespace

void ArgmaxRows(const float* logits, int rows, int vocab, int32_t* out, cudaStream_t stream) {
  if (rows <= 0 || vocab <= 0) return;
  ArgmaxKernel<<<rows, kThreads, 0, stream>>>(logits, vocab, out);
}

}  // namespace mxserve::kernels::cuda::dense
