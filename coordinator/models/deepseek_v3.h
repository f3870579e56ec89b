// DeepSeek-V3 / Kimi K2 (DeepseekV3ForCausalLM) dense path on CPU in fp32 (docs/MODELS.md,
// DeepSeek-V3 and Kimi K2): MLA over a paged latent KV cache, dense SwiGLU MLPs in the first
// layers, sigmoid group-limited routing with shared experts. Routed experts run behind MoeExecutor.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/models/model.h"
#include "coordinator/models/rope.h"

namespace mxserve {

// The config fields this model relies on (InvalidArgument naming the field).
absl::Status CheckDeepseekV3Config(const ModelConfig& config);

// MLA's softmax scale: (qk_nope + qk_rope)^-1/2, times mscale^2 with
// mscale = 0.1 * mscale_all_dim * ln(factor) + 1 when YaRN sets mscale_all_dim.
double MlaSoftmaxScale(const ModelConfig& config);

class DeepseekV3Model : public CausalLM {
 public:
  // How attention reads the latent cache. kAuto: chunks of several tokens (prefill) expand the
  // cached latents into per-head keys and values; one-token chunks (decode) use the absorbed
  // form (queries mapped into the latent space, values taken from the latent afterwards). The
  // two are equal in exact arithmetic; the forced forms exist for tests.
  enum class MlaForm { kAuto, kExpanded, kAbsorbed };

  // Reads and checks every dense tensor (BF16 or F32, shapes from the config) as fp32; routed
  // experts are left to the workers.
  static absl::StatusOr<std::unique_ptr<DeepseekV3Model>> Create(const ModelConfig& config,
                                                                 const Checkpoint& checkpoint,
                                                                 MoeExecutor* moe,
                                                                 ThreadPool* pool);

  const ModelConfig& config() const override { return config_; }
  int vocab_size() const override { return config_.vocab_size; }
  int num_layers() const override { return config_.num_hidden_layers; }
  // The latent cache: one row of kv_lora_rank + qk_rope_head_dim per layer and position.
  int num_kv_heads() const override { return 1; }
  int head_dim() const override { return config_.kv_lora_rank + config_.qk_rope_head_dim; }
  int kv_planes() const override { return 1; }
  int64_t max_position_embeddings() const override { return config_.max_position_embeddings; }
  void set_mla_form(MlaForm form) { form_ = form; }

  absl::StatusOr<ForwardOutput> Forward(const ForwardBatch& batch, KvCache& cache) override;

 private:
  struct Layer {
    std::vector<float> input_norm, post_norm;  // [H]
    std::vector<float> q_a, q_a_norm, q_b;     // [Rq, H], [Rq], [nh (P+R), Rq] (q_lora_rank set)
    std::vector<float> q;                      // [nh (P+R), H] (q_lora_rank null)
    std::vector<float> kv_a, kv_a_norm, kv_b;  // [Rkv+R, H], [Rkv], [nh (P+V), Rkv]
    std::vector<float> o;                      // [H, nh V]
    bool moe = false;
    std::vector<float> gate_up, down;          // dense MLP: [2 Id, H] (gate rows, then up), [H, Id]
    std::vector<float> router, bias;           // [E, H], [E] e_score_correction_bias
    std::vector<float> shared_gate_up, shared_down;  // [2 Is, H], [H, Is]; empty without shared
  };

  DeepseekV3Model() = default;
  absl::Status Load(const Checkpoint& checkpoint);
  absl::Status LoadLayer(const Checkpoint& ckpt, int l, Layer& L);
  void ParallelFor(int64_t n, const std::function<void(int64_t)>& fn) const;
  // Attention of layer l for every token from q [T, nh (P+R)] (rope applied) and the latent
  // cache (this step's rows already written) into attn [T, nh V].
  void Attend(int l, const ForwardBatch& batch, const std::vector<int64_t>& chunk_begin,
              const std::vector<int64_t>& tok_pos, const float* q, const KvCache& cache,
              float* attn) const;
  // Sigmoid scores, correction bias for the choice only, group-limited top-k, weights from the
  // scores (renormalised when norm_topk_prob) times routed_scaling_factor.
  void Route(const Layer& L, const float* y, int64_t T, int32_t* ids, float* weights) const;

  ModelConfig config_;
  MoeExecutor* moe_ = nullptr;
  ThreadPool* pool_ = nullptr;
  RopeParams rope_;
  float scale_ = 1.0f;
  MlaForm form_ = MlaForm::kAuto;
  std::vector<float> embed_, final_norm_, lm_head_;
  std::vector<Layer> layers_;
};

}  // namespace mxserve
