// What the ExpertService runs a validated RunExperts batch on: the shard's MXFP4 kernels in
// production (ShardExecutor), or a stand-in (benchmarks measuring only the transport).
#pragma once

#include <memory>

#include "absl/status/status.h"
#include "experts/expert_batch.h"
#include "experts/expert_shard.h"

namespace mxserve {

class ThreadPool;

class ExpertExecutor {
 public:
  virtual ~ExpertExecutor() = default;
  // out [T, H] overwritten. The batch has already been validated by the service (layer in
  // range, hidden the model's, ids -1 or held here, sizes consistent). May be called from
  // several threads at once.
  virtual absl::Status Run(const ExpertBatch& batch, float* out) = 0;
  // The BF16 wire: x and out [T, hidden] little-endian bf16 at any alignment (batch.x is
  // ignored); out rounded to nearest even
  // (core/bf16.h). This default widens x on the calling thread, runs Run and narrows its output;
  // an executor that copies to a device overrides it to move half the bytes and convert there.
  virtual absl::Status RunBf16(const ExpertBatch& batch, const void* x, void* out);
  // Host memory that calls' tensors will come from and go to until UnpinHostMemory (a
  // shared-memory object the worker keeps mapped): an executor that copies to a device may
  // page-lock it here so that its copies go straight to and from it. Best effort: Run must be
  // right whether or not it did. UnpinHostMemory comes before the memory is unmapped, once no
  // call uses it.
  virtual void PinHostMemory(void* p, size_t n) {}
  virtual void UnpinHostMemory(void* p) {}
};

// Runs the shard's experts with the fast CPU kernel on a pool (pool may be nullptr).
class ShardExecutor final : public ExpertExecutor {
 public:
  ShardExecutor(std::shared_ptr<const ExpertShard> shard, std::shared_ptr<ThreadPool> pool)
      : shard_(std::move(shard)), pool_(std::move(pool)) {}
  absl::Status Run(const ExpertBatch& batch, float* out) override {
    return shard_->Run(batch, out, pool_.get());
  }
  const ExpertShard& shard() const { return *shard_; }

 private:
  std::shared_ptr<const ExpertShard> shard_;
  std::shared_ptr<ThreadPool> pool_;
};

}  // namespace mxserve
