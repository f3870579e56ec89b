// The dense runner's shared fp32 building blocks (gpt-oss, DeepSeek-V3): reading checkpoint
// tensors as fp32 with their shapes checked, RMSNorm and the BLAS-backed linear layer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/safetensors.h"
#include "core/thread_pool.h"

namespace mxserve {

// Reads a dense tensor (BF16 or F32) as fp32 into dst (numel of `shape` floats); errors name it.
absl::Status ReadDense(const Checkpoint& ckpt, const std::string& name,
                       std::vector<int64_t> shape, ThreadPool* pool, float* dst);
// The tensor's dtype and shape against the config, before anything is allocated for it.
absl::Status CheckShape(const Checkpoint& ckpt, const std::string& name,
                        const std::vector<int64_t>& shape);
// CheckShape, then ReadDense into `out` (resized).
absl::Status ReadInto(const Checkpoint& ckpt, const std::string& name, std::vector<int64_t> shape,
                      ThreadPool* pool, std::vector<float>& out);

// y = w * (x / sqrt(mean(x^2) + eps)) per row of h values.
void RmsNorm(const float* x, const float* w, int64_t rows, int h, float eps, float* y);
// C[m, n] = A[m, k] * W[n, k]^T (+ bias[n] when given).
void Linear(const float* a, const float* w, const float* bias, int64_t m, int n, int k, float* c);

}  // namespace mxserve
