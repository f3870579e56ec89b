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
  std::string model_type;               // "gpt_oss"
  std::string architecture;             // "GptOssForCausalLM"
  int num_hidden_layers = 0;
  int hidden_size = 0;
  int intermediate_size = 0;            // per expert
  int num_local_experts = 0;
  int num_experts_per_tok = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;
  int head_dim = 0;
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

  bool IsSlidingLayer(int layer) const { return layer_types[layer] == "sliding_attention"; }

  static absl::StatusOr<ModelConfig> FromJsonText(const std::string& text);
  static absl::StatusOr<ModelConfig> Load(const std::string& model_dir);  // reads config.json
};

}  // namespace mxserve
