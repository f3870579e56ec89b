// The architecture plug-in interface of the dense model runner (one implementation per model
// family, e.g. gpt_oss.h) and the registry that picks one by config.json's architecture.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "coordinator/engine/model_runner.h"
#include "coordinator/models/kv_cache.h"
#include "coordinator/models/moe_executor.h"
#include "core/model_config.h"
#include "core/safetensors.h"
#include "core/thread_pool.h"

namespace mxserve {

// A causal LM's dense part on the coordinator; MoE layers call out to a MoeExecutor.
class CausalLM {
 public:
  virtual ~CausalLM() = default;

  virtual const ModelConfig& config() const = 0;
  virtual int vocab_size() const = 0;
  virtual int num_layers() const = 0;
  // What the KV cache must hold per layer and position.
  virtual int num_kv_heads() const = 0;
  virtual int head_dim() const = 0;
  // 2: a K and a V row of num_kv_heads x head_dim per layer and position; 1: one row only
  // (MLA's latent cache).
  virtual int kv_planes() const { return 2; }
  virtual int64_t max_position_embeddings() const = 0;

  // Runs one step: every chunk's tokens at positions [start_pos, start_pos + n), reading KV of
  // earlier positions from `cache` through the chunk's block_table and writing KV for the new
  // ones. The batch must already be valid (CheckForwardBatch: ids, positions, block tables).
  // Rows of logits as ForwardOutput documents (last token, or all tokens when all_logits).
  virtual absl::StatusOr<ForwardOutput> Forward(const ForwardBatch& batch, KvCache& cache) = 0;
};

// Builds the model named by config.architecture ("GptOssForCausalLM", "DeepseekV3ForCausalLM"). The checkpoint is read
// during the call only (weights are copied); `moe` and `pool` must outlive the model (`pool`
// may be null: single-threaded).
absl::StatusOr<std::unique_ptr<CausalLM>> CreateCausalLM(const ModelConfig& config,
                                                         const Checkpoint& checkpoint,
                                                         MoeExecutor* moe, ThreadPool* pool);

}  // namespace mxserve
