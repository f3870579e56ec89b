// Test support for DeepSeek-V3 / Kimi K2: a seeded random tiny checkpoint in the hub layout
// (docs/MODELS.md, DeepSeek-V3 and Kimi K2; routed experts as bf16 per-expert tensors whose
// values are exactly representable in MXFP4, so quantizing them at load loses nothing), and a
// slow float64 twin of the forward pass written straight from the formulas: full recompute,
// naive (expanded) MLA with HF's permute-then-rotate-half RoPE, its own YaRN table and bf16
// decoding. It shares no code with the model under test and reads its sizes from the spec,
// not from ModelConfig.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/safetensors.h"

namespace mxserve::testing {

struct TinyDsSpec {
  std::string model_type = "deepseek_v3";  // or "kimi_k2"
  int layers = 3;
  int first_dense = 1;  // first_k_dense_replace
  int hidden = 64;
  int dense_inter = 48;
  int moe_inter = 32;
  int experts = 8;
  int top_k = 3;
  int n_group = 4;
  int topk_group = 2;
  int n_shared = 1;
  int heads = 4;
  int q_lora = 24;  // 0: null (plain q_proj)
  int kv_lora = 16;
  int nope = 8;
  int rope = 8;
  int v = 12;
  int vocab = 97;
  double rope_theta = 10000.0;
  bool yarn = true;
  double factor = 4.0;
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 1.0;
  double mscale_all_dim = 1.0;
  int64_t original_max_position = 16;
  int64_t max_position = 64;  // = factor * original, so HF versions agree on the factor
  double routed_scaling = 2.5;
  bool norm_topk_prob = true;
  double rms_norm_eps = 0.3;   // large, so that using it for the latent norms would show
  double bias_std = 0.3;       // e_score_correction_bias
};

std::string TinyDsConfigJson(const TinyDsSpec& spec);
// Writes DIR/config.json and DIR/model.safetensors (norms of layer 0 F32, the correction bias
// F32, every other tensor BF16).
absl::Status WriteTinyDeepseek(const std::string& dir, const TinyDsSpec& spec, uint32_t seed);

class ReferenceDeepseek {
 public:
  static absl::StatusOr<ReferenceDeepseek> Load(const TinyDsSpec& spec, const Checkpoint& ckpt);
  // Logits [T][vocab] for every position of `tokens` (positions 0..T-1).
  std::vector<std::vector<double>> Logits(const std::vector<int32_t>& tokens) const;
  // `n` greedy tokens after `prompt` (full recompute each step).
  std::vector<int32_t> Greedy(std::vector<int32_t> prompt, int n) const;

 private:
  struct Layer {
    std::vector<double> in_norm, post_norm, qa, qa_norm, qb, q, kva, kva_norm, kvb, o;
    std::vector<double> gate, up, down;             // dense MLP
    std::vector<double> router, bias;               // [E][H], [E]
    std::vector<std::vector<double>> eg, eu, ed;    // routed experts
    std::vector<double> sg, su, sd;                 // shared experts
  };
  TinyDsSpec s_;
  std::vector<double> embed_, norm_, lm_head_, inv_freq_;
  double attn_factor_ = 1.0, scale_ = 1.0;
  std::vector<Layer> layers_;
};

double RelL2D(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace mxserve::testing
