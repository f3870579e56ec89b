// Runs a worker's shard on one CUDA device: every layer's experts uploaded once in the kernel
// layout (converted on the device from the checkpoint bytes), calls serialised on the
// executor's own stream with pinned staging buffers. Built only with MXSERVE_HAVE_CUDA.
#pragma once

#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "experts/expert_executor.h"
#include "experts/expert_shard.h"
#include "kernels/cuda/moe_cuda.h"

namespace mxserve {

class GpuExecutor final : public ExpertExecutor {
 public:
  // device: the N of cuda:N. Uploads every layer before returning. pin_host_memory: whether
  // PinHostMemory page-locks (false: copies always go through the staging buffers).
  static absl::StatusOr<std::unique_ptr<GpuExecutor>> Create(std::shared_ptr<const ExpertShard> shard,
                                                             int device, bool pin_host_memory = true);
  absl::Status Run(const ExpertBatch& batch, float* out) override;
  // bf16 over PCIe, converted on the device (CudaMoeRunner::RunBf16).
  absl::Status RunBf16(const ExpertBatch& batch, const void* x, void* out) override;
  // Page-locks a shared-memory object (cudaHostRegister), so that CudaMoeRunner copies
  // straight from and to it instead of through its staging buffers; a failure is logged once
  // and the staging path stays.
  void PinHostMemory(void* p, size_t n) override;
  void UnpinHostMemory(void* p) override;
  size_t device_bytes() const { return device_bytes_; }

 private:
  GpuExecutor() = default;
  absl::Status CheckLayer(int layer) const;
  std::shared_ptr<const ExpertShard> shard_;  // host layout: validation (ids held, shapes)
  std::vector<std::unique_ptr<kernels::cuda::CudaMoeLayer>> layers_;
  size_t device_bytes_ = 0;
  bool pin_host_memory_ = true;
  absl::Mutex mu_;
  std::unique_ptr<kernels::cuda::CudaMoeRunner> runner_ ABSL_GUARDED_BY(mu_);
  bool pin_failed_logged_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace mxserve
