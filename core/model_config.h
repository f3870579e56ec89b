// Model configuration read from a model folder's config.json. Every field used is checked
// (present or defaulted as HF does, right type, in range, consistent); errors name the field.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace mxserve {

struct RopeScaling {
  std::string rope_type = "yarn";       // "yarn" or "default" (none)
  double factor = 1.0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  int64_t original_max_position_embeddings = 4096;
  bool truncate = true;                 // HF default true; gpt-oss sets false
  // YaRN's attention factor inputs (0 = absent). HF: attention_factor when given, else
  // get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim) when both are nonzero, else
  // get_mscale(factor). DeepSeek-V3's MLA softmax scale also uses mscale_all_dim.
  double mscale = 0.0;
  double mscale_all_dim = 0.0;
  double attention_factor = 0.0;
};

// The largest value config.json may give each dimension. Far above every released model
// (gpt-oss-120b: 36 layers, hidden 2880, 128 experts, 64 heads of 64, vocab 201,088; the
// largest vocabularies are near 262,144), and small enough that no product of two of them
// overflows int64 and no buffer sized from the config alone asks for more than a few GiB
// before the checkpoint's own tensor shapes have been checked against it.
struct ModelLimits {
  static constexpr int kMaxLayers = 1024;
  static constexpr int kMaxHiddenSize = 1 << 16;          // 65,536
  static constexpr int kMaxIntermediateSize = 1 << 18;    // 262,144 (per expert)
  static constexpr int kMaxExperts = 1 << 12;             // 4,096
  static constexpr int kMaxHeads = 1 << 10;               // attention and key/value heads
  static constexpr int kMaxHeadDim = 1 << 10;
  static constexpr int kMaxVocab = 1 << 24;               // the tokenizer loaders' id bound too
  static constexpr int64_t kMaxPositions = int64_t{1} << 24;  // positions, windows, RoPE lengths
};

struct ModelConfig {
  std::string model_type;               // "gpt_oss", "deepseek_v3" or "kimi_k2"
  std::string architecture;             // "GptOssForCausalLM" or "DeepseekV3ForCausalLM"
  int num_hidden_layers = 0;
  int hidden_size = 0;
  int intermediate_size = 0;            // per routed expert (DeepSeek: moe_intermediate_size)
  int num_local_experts = 0;            // routed experts (DeepSeek: n_routed_experts)
  int num_experts_per_tok = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;
  int head_dim = 0;                     // the RoPE width (DeepSeek: qk_rope_head_dim, as HF sets)
  int vocab_size = 0;
  int sliding_window = 0;
  std::vector<std::string> layer_types; // "sliding_attention" | "full_attention", one per layer
  int64_t max_position_embeddings = 0;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;             // absent: GptOssConfig default (yarn x32); null: "default"
  double rms_norm_eps = 1e-5;
  double swiglu_limit = 7.0;
  double swiglu_alpha = 1.702;
  bool attention_bias = true;
  bool tie_word_embeddings = false;
  std::vector<int> eos_token_ids;       // eos_token_id may be an int or a list
  int pad_token_id = -1;
  std::string quant_method;             // "mxfp4" (required for expert tensors in blocks/scales)

  // DeepSeek-V3 / Kimi K2 only (docs/MODELS.md, DeepSeek-V3 and Kimi K2); zero for gpt-oss.
  int q_lora_rank = 0;                  // 0: config.json's null, a plain q_proj
  int kv_lora_rank = 0;
  int qk_nope_head_dim = 0;
  int qk_rope_head_dim = 0;
  int v_head_dim = 0;
  int dense_intermediate_size = 0;      // config.json's intermediate_size (dense MLP layers)
  int n_shared_experts = 0;             // shared MLP width = intermediate_size * n_shared_experts
  int n_group = 1;
  int topk_group = 1;
  int first_k_dense_replace = 0;        // layer l is MoE iff l >= first_k_dense_replace
  bool norm_topk_prob = true;
  double routed_scaling_factor = 1.0;
  bool rope_interleave = true;          // RoPE on pairs (2i, 2i+1) of the rope dims

  bool IsDeepseekV3() const { return model_type == "deepseek_v3" || model_type == "kimi_k2"; }
  // The layers whose MLP is the routed experts (every layer for gpt-oss).
  bool IsMoeLayer(int layer) const { return layer >= first_k_dense_replace; }

  bool IsSlidingLayer(int layer) const { return layer_types[layer] == "sliding_attention"; }

  static absl::StatusOr<ModelConfig> FromJsonText(const std::string& text);
  static absl::StatusOr<ModelConfig> Load(const std::string& model_dir);  // reads config.json
};

// The routed experts' activation, as kernels/moe/moe.h names it: "swiglu" (DeepSeek-V3 / Kimi
// K2: silu(gate) * up, no biases) or "swiglu_clamped" (gpt-oss).
inline const char* ExpertActivationName(const ModelConfig& c) {
  return c.IsDeepseekV3() ? "swiglu" : "swiglu_clamped";
}

}  // namespace mxserve
