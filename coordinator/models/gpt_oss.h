// gpt-oss (GptOssForCausalLM) dense path on CPU in fp32 (docs/MODELS.md, gpt-oss): embedding,
// RMSNorm, GQA attention with sinks, sliding window and YaRN RoPE over the paged KV cache,
// router top-k with softmax over the chosen, unembedding. Experts run behind MoeExecutor.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/models/model.h"
#include "coordinator/models/rope.h"

namespace mxserve {

// The config fields gpt-oss relies on, checked before any tensor is read (InvalidArgument
// naming the field). The GPU model (coordinator/gpu/gpt_oss_gpu.h) makes the same checks.
absl::Status CheckGptOssConfig(const ModelConfig& config);

class GptOssModel : public CausalLM {
 public:
  // Reads and checks every dense tensor (dtype BF16 or F32, shape from the config), converting
  // to fp32; expert tensors are left to the workers.
  static absl::StatusOr<std::unique_ptr<GptOssModel>> Create(const ModelConfig& config,
                                                             const Checkpoint& checkpoint,
                                                             MoeExecutor* moe, ThreadPool* pool);

  const ModelConfig& config() const override { return config_; }
  int vocab_size() const override { return config_.vocab_size; }
  int num_layers() const override { return config_.num_hidden_layers; }
  int num_kv_heads() const override { return config_.num_key_value_heads; }
  int head_dim() const override { return config_.head_dim; }
  int64_t max_position_embeddings() const override { return config_.max_position_embeddings; }
  const RopeParams& rope() const { return rope_; }

  absl::StatusOr<ForwardOutput> Forward(const ForwardBatch& batch, KvCache& cache) override;

 private:
  struct Layer {
    bool sliding = false;
    std::vector<float> input_norm;   // [H]
    std::vector<float> post_norm;    // [H]
    std::vector<float> qkv_w;        // [(nq + 2 nkv) d, H]: q rows, then k, then v
    std::vector<float> qkv_b;        // [(nq + 2 nkv) d]
    std::vector<float> o_w;          // [H, nq d]
    std::vector<float> o_b;          // [H]
    std::vector<float> sinks;        // [nq]
    std::vector<float> router_w;     // [E, H]
    std::vector<float> router_b;     // [E]
  };

  GptOssModel() = default;
  absl::Status Load(const Checkpoint& checkpoint);
  void ParallelFor(int64_t n, const std::function<void(int64_t)>& fn) const;
  // Attention of layer l for every token (q, k, v in qkv rows; K/V of the step already in the
  // cache) into attn [T, nq * d].
  void Attend(int l, const ForwardBatch& batch, const std::vector<int64_t>& chunk_begin,
              const std::vector<int64_t>& tok_pos, const float* qkv, const KvCache& cache,
              float* attn) const;

  ModelConfig config_;
  MoeExecutor* moe_ = nullptr;
  ThreadPool* pool_ = nullptr;
  RopeParams rope_;
  std::vector<float> embed_;         // [V, H] (lookups only)
  std::vector<float> final_norm_;    // [H]
  std::vector<float> lm_head_;       // [V, H]; empty when tied (then embed_ is used)
  std::vector<Layer> layers_;
};

}  // namespace mxserve
