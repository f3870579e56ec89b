#include "coordinator/models/cpu_model_runner.h"

#include "absl/strings/str_cat.h"
#include "coordinator/models/forward_batch_check.h"
#include "core/status.h"

namespace mxserve {

absl::StatusOr<std::unique_ptr<CpuModelRunner>> CpuModelRunner::Create(
    std::unique_ptr<CausalLM> model, int num_blocks, int block_size, int max_model_len) {
  if (model == nullptr) return absl::InvalidArgumentError("CpuModelRunner: no model");
  if (max_model_len <= 0 || max_model_len > model->max_position_embeddings()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_model_len ", max_model_len, " must be in [1, max_position_embeddings = ",
        model->max_position_embeddings(), "]"));
  }
  ASSIGN_OR_RETURN(auto cache, KvCache::Create(model->num_layers(), model->num_kv_heads(),
                                               model->head_dim(), num_blocks, block_size,
                                               model->kv_planes()));
  std::unique_ptr<CpuModelRunner> r(new CpuModelRunner());
  r->vocab_size_ = model->vocab_size();
  r->block_size_ = block_size;
  r->num_blocks_ = num_blocks;
  r->max_model_len_ = max_model_len;
  absl::MutexLock lock(&r->mu_);
  r->model_ = std::move(model);
  r->cache_ = std::move(cache);
  return r;
}

absl::StatusOr<ForwardOutput> CpuModelRunner::Run(const ForwardBatch& batch) {
  RETURN_IF_ERROR(CheckForwardBatch(
      batch, RunnerShape{vocab_size_, block_size_, num_blocks_, max_model_len_}));
  absl::MutexLock lock(&mu_);
  return model_->Forward(batch, *cache_);
}

}  // namespace mxserve
