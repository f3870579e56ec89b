#include "experts/gpu_executor.h"

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"

namespace mxserve {

absl::StatusOr<std::unique_ptr<GpuExecutor>> GpuExecutor::Create(std::shared_ptr<const ExpertShard> shard,
                                                                 int device, bool pin_host_memory) {
  std::unique_ptr<GpuExecutor> ex(new GpuExecutor());
  ex->pin_host_memory_ = pin_host_memory;
  auto runner = kernels::cuda::CudaMoeRunner::Create(device);
  if (!runner.ok()) return runner.status();
  for (int l = 0; l < shard->num_layers(); ++l) {
    auto layer = kernels::cuda::CudaMoeLayer::Upload(shard->layer(l), (*runner)->stream());
    if (!layer.ok()) {
      return absl::Status(layer.status().code(), absl::StrCat("layer ", l, ": ", layer.status().message()));
    }
    ex->device_bytes_ += (*layer)->device_bytes();
    ex->layers_.push_back(*std::move(layer));
  }
  ex->shard_ = std::move(shard);
  absl::MutexLock lock(&ex->mu_);
  ex->runner_ = *std::move(runner);
  return ex;
}

void GpuExecutor::PinHostMemory(void* p, size_t n) {
  if (!pin_host_memory_) return;
  absl::MutexLock lock(&mu_);
  if (auto s = runner_->PinHost(p, n); !s.ok() && !pin_failed_logged_) {
    pin_failed_logged_ = true;
    fprintf(stderr, "mxserve-worker: shared memory not page-locked (%s); copies go through staging buffers\n",
            std::string(s.message()).c_str());
  }
}

void GpuExecutor::UnpinHostMemory(void* p) {
  if (!pin_host_memory_) return;
  absl::MutexLock lock(&mu_);
  runner_->UnpinHost(p);
}

absl::Status GpuExecutor::CheckLayer(int layer) const {
  if (layer < 0 || layer >= static_cast<int>(layers_.size())) {
    return absl::InvalidArgumentError(absl::StrCat("layer ", layer, " not in [0, ", layers_.size(), ")"));
  }
  return absl::OkStatus();
}

absl::Status GpuExecutor::Run(const ExpertBatch& batch, float* out) {
  if (auto s = CheckLayer(batch.layer); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  return runner_->Run(*layers_[batch.layer], shard_->layer(batch.layer), batch, out);
}

absl::Status GpuExecutor::RunBf16(const ExpertBatch& batch, const void* x, void* out) {
  const int layer = batch.layer;
  if (auto s = CheckLayer(layer); !s.ok()) return s;
  if (batch.hidden != layers_[layer]->hidden()) {
    return absl::InvalidArgumentError(absl::StrCat("hidden ", batch.hidden, " is not layer ", layer,
                                                   "'s hidden size ", layers_[layer]->hidden()));
  }
  absl::MutexLock lock(&mu_);
  return runner_->RunBf16(*layers_[layer], shard_->layer(layer), batch, x, out);
}

}  // namespace mxserve
