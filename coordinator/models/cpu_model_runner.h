// ModelRunner on the coordinator's CPU: validates each step's batch, then runs a CausalLM over
// its own paged fp32 KV cache.
#pragma once

#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/engine/model_runner.h"
#include "coordinator/models/kv_cache.h"
#include "coordinator/models/model.h"

namespace mxserve {

class CpuModelRunner : public ModelRunner {
 public:
  // max_model_len must not exceed the model's max_position_embeddings.
  static absl::StatusOr<std::unique_ptr<CpuModelRunner>> Create(std::unique_ptr<CausalLM> model,
                                                                int num_blocks, int block_size,
                                                                int max_model_len);

  // Checks the batch first (CheckForwardBatch: an InvalidArgument naming the chunk).
  absl::StatusOr<ForwardOutput> Run(const ForwardBatch& batch) override;

  int vocab_size() const override { return vocab_size_; }
  int block_size() const override { return block_size_; }
  int num_blocks() const override { return num_blocks_; }
  int max_model_len() const override { return max_model_len_; }

 private:
  CpuModelRunner() = default;

  int vocab_size_ = 0, block_size_ = 0, num_blocks_ = 0, max_model_len_ = 0;
  absl::Mutex mu_;  // one step at a time: the cache is written in place
  std::unique_ptr<CausalLM> model_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<KvCache> cache_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mxserve
