// The GPU runner's GEMMs through cuBLASLt: y[m, n] = x[m, k] * w[n, k]^T with row-major
// operands (a linear layer without bias), fp32 accumulation and fp32 output. bf16 x bf16 for the
// projections and lm_head; fp32 x fp32 (no TF32) for the router, whose top-k should see the
// same logits as the CPU runner's. One algorithm per shape, chosen by cuBLASLt's heuristic the
// first time the shape runs and kept.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "absl/status/statusor.h"
#include "coordinator/gpu/device_buffer.h"

namespace mxserve::gpu {

class LtGemm {
 public:
  static absl::StatusOr<std::unique_ptr<LtGemm>> Create();
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  absl::Status LinearBf16(const uint16_t* x, const uint16_t* w, int m, int n, int k, float* y,
                          cudaStream_t stream);
  absl::Status LinearF32(const float* x, const float* w, int m, int n, int k, float* y,
                         cudaStream_t stream);

 private:
  LtGemm() = default;
  struct Plan {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  absl::StatusOr<const Plan*> GetPlan(bool bf16, int m, int n, int k);
  absl::Status Run(bool bf16, const void* x, const void* w, int m, int n, int k, float* y,
                   cudaStream_t stream);

  cublasLtHandle_t handle_ = nullptr;
  DeviceArray<uint8_t> workspace_;
  std::map<std::tuple<bool, int, int, int>, Plan> plans_;
};

}  // namespace mxserve::gpu
