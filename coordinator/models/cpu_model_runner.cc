#include "coordinator/models/cpu_model_runner.h"

#include <unordered_map>
#include <unordered_set>

#include "absl/strings/str_cat.h"
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
                                               model->head_dim(), num_blocks, block_size));
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

absl::Status CpuModelRunner::Validate(const ForwardBatch& batch) const {
  std::unordered_set<int64_t> seen;
  // KV slot (block * block_size + slot) -> the chunk writing it this step.
  std::unordered_map<int64_t, size_t> writer;
  for (size_t i = 0; i < batch.chunks.size(); ++i) {
    const SequenceChunk& ch = batch.chunks[i];
    const std::string who = absl::StrCat("chunk ", i, " (seq_id ", ch.seq_id, "): ");
    if (!seen.insert(ch.seq_id).second) {
      return absl::InvalidArgumentError(absl::StrCat(who, "seq_id appears twice in the batch"));
    }
    if (ch.tokens.empty()) return absl::InvalidArgumentError(absl::StrCat(who, "no tokens"));
    if (ch.start_pos < 0) {
      return absl::InvalidArgumentError(absl::StrCat(who, "start_pos ", ch.start_pos, " < 0"));
    }
    const int64_t end = static_cast<int64_t>(ch.start_pos) + static_cast<int64_t>(ch.tokens.size());
    if (end > max_model_len_) {
      return absl::InvalidArgumentError(absl::StrCat(who, "positions up to ", end - 1,
                                                     " reach max_model_len ", max_model_len_));
    }
    for (size_t j = 0; j < ch.tokens.size(); ++j) {
      if (ch.tokens[j] < 0 || ch.tokens[j] >= vocab_size_) {
        return absl::InvalidArgumentError(absl::StrCat(who, "token ", j, " id ", ch.tokens[j],
                                                       " outside vocab [0, ", vocab_size_, ")"));
      }
    }
    const int64_t blocks_needed = (end + block_size_ - 1) / block_size_;
    if (static_cast<int64_t>(ch.block_table.size()) < blocks_needed) {
      return absl::InvalidArgumentError(absl::StrCat(
          who, "block_table has ", ch.block_table.size(), " blocks, positions [0, ", end,
          ") need ", blocks_needed, " of size ", block_size_));
    }
    for (int64_t b = 0; b < blocks_needed; ++b) {
      if (ch.block_table[b] < 0 || ch.block_table[b] >= num_blocks_) {
        return absl::InvalidArgumentError(absl::StrCat(who, "block_table[", b, "] = ",
                                                       ch.block_table[b], " outside [0, ",
                                                       num_blocks_, ")"));
      }
    }
    // Two chunks writing the same KV slot would corrupt each other's cache silently.
    for (int64_t p = ch.start_pos; p < end; ++p) {
      const int64_t key = static_cast<int64_t>(ch.block_table[p / block_size_]) * block_size_ +
                          p % block_size_;
      auto [it, inserted] = writer.emplace(key, i);
      if (!inserted) {
        return absl::InvalidArgumentError(absl::StrCat(
            who, "position ", p, " writes KV block ", ch.block_table[p / block_size_], " slot ",
            p % block_size_, ", which chunk ", it->second, " also writes in this step"));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ForwardOutput> CpuModelRunner::Run(const ForwardBatch& batch) {
  RETURN_IF_ERROR(Validate(batch));
  absl::MutexLock lock(&mu_);
  return model_->Forward(batch, *cache_);
}

}  // namespace mxserve
