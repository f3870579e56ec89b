// config.json parsing for gpt-oss (HF GptOssConfig) and DeepSeek-V3 / Kimi K2 (DeepseekV3Config). Every field used is checked; HF defaults
// apply only where GptOssConfig has a default that does not silently pick a model size.
#include "core/model_config.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <optional>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/bounded_json.h"
#include "core/status.h"
#include "nlohmann/json.hpp"

namespace mxserve {
namespace {

using json = nlohmann::json;
using L = ModelLimits;

// Reads fields of one JSON object, producing errors "SOURCE: field 'PREFIXNAME' ...".
class Fields {
 public:
  Fields(const json& obj, std::string source, std::string prefix = "")
      : obj_(obj), source_(std::move(source)), prefix_(std::move(prefix)) {}

  absl::Status Error(std::string_view name, std::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(source_, ": field '", prefix_, std::string(name), "' ", std::string(what)));
  }
  const json* Find(std::string_view name) const {
    auto it = obj_.find(std::string(name));
    if (it == obj_.end()) return nullptr;
    return &*it;
  }
  bool Has(std::string_view name) const { return Find(name) != nullptr; }
  bool IsNull(std::string_view name) const {
    const json* v = Find(name);
    return v != nullptr && v->is_null();
  }

  // An integer in [lo, hi]; `fallback` when absent (required when no fallback).
  absl::StatusOr<int64_t> Int(std::string_view name, int64_t lo, int64_t hi,
                              std::optional<int64_t> fallback = std::nullopt) const {
    const std::string range = RangeText(lo, hi);
    const json* v = Find(name);
    if (v == nullptr || v->is_null()) {
      if (fallback) return *fallback;
      return Error(name, absl::StrCat("is required (", range, ")"));
    }
    int64_t x;
    if (v->is_number_integer()) {
      if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
        return Error(name, absl::StrCat("must be ", range, ", got ", v->dump()));
      }
      x = v->get<int64_t>();
    } else if (v->is_number_float() && std::isfinite(v->get<double>()) &&
               std::floor(v->get<double>()) == v->get<double>() &&
               std::fabs(v->get<double>()) < 9e15) {
      x = static_cast<int64_t>(v->get<double>());  // 4096.0 is an integer to Python too
    } else {
      return Error(name, absl::StrCat("must be ", range, ", got ", v->dump()));
    }
    if (x < lo || x > hi) return Error(name, absl::StrCat("must be ", range, ", got ", x));
    return x;
  }
  absl::StatusOr<int> Int32(std::string_view name, int64_t lo, int64_t hi = INT32_MAX,
                            std::optional<int64_t> fallback = std::nullopt) const {
    ASSIGN_OR_RETURN(int64_t x, Int(name, lo, hi, fallback));
    return static_cast<int>(x);
  }
  // A finite number > lo (exclusive when lo_exclusive) ; `fallback` when absent.
  absl::StatusOr<double> Number(std::string_view name, double lo, bool lo_exclusive,
                                std::optional<double> fallback = std::nullopt) const {
    const std::string range = absl::StrCat("a number ", lo_exclusive ? "> " : ">= ", lo);
    const json* v = Find(name);
    if (v == nullptr || v->is_null()) {
      if (fallback) return *fallback;
      return Error(name, absl::StrCat("is required (", range, ")"));
    }
    if (!v->is_number()) return Error(name, absl::StrCat("must be ", range, ", got ", v->dump()));
    const double x = v->get<double>();
    if (!std::isfinite(x) || x < lo || (lo_exclusive && x == lo)) {
      return Error(name, absl::StrCat("must be ", range, ", got ", v->dump()));
    }
    return x;
  }
  absl::StatusOr<bool> Bool(std::string_view name, bool fallback) const {
    const json* v = Find(name);
    if (v == nullptr || v->is_null()) return fallback;
    if (!v->is_boolean()) return Error(name, "must be true or false, got " + v->dump());
    return v->get<bool>();
  }
  absl::StatusOr<std::string> String(std::string_view name,
                                     std::optional<std::string> fallback = std::nullopt) const {
    const json* v = Find(name);
    if (v == nullptr || v->is_null()) {
      if (fallback) return *fallback;
      return Error(name, "is required (a string)");
    }
    if (!v->is_string()) return Error(name, "must be a string, got " + v->dump());
    return v->get<std::string>();
  }

 private:
  static std::string RangeText(int64_t lo, int64_t hi) {
    if (lo == 1 && hi >= INT32_MAX) return "a positive integer";
    if (lo == 0 && hi >= INT32_MAX) return "a non-negative integer";
    return absl::StrCat("an integer in [", lo, ", ", hi, "]");
  }
  const json& obj_;
  std::string source_;
  std::string prefix_;
};

absl::Status ParseRopeScaling(const json& root, const std::string& source, ModelConfig& c) {
  const Fields top(root, source);
  RopeScaling& r = c.rope_scaling;
  const json* rs = top.Find("rope_scaling");
  if (rs == nullptr) {
    // GptOssConfig's default: yarn x32 with truncate false; HF's yarn takes
    // original_max_position_embeddings from max_position_embeddings when the dict lacks it.
    r = RopeScaling{"yarn", 32.0, 32.0, 1.0, c.max_position_embeddings, false};
    return absl::OkStatus();
  }
  if (rs->is_null()) {  // explicit null: plain RoPE
    r = RopeScaling{};
    r.rope_type = "default";
    r.factor = 1.0;
    return absl::OkStatus();
  }
  if (!rs->is_object()) return top.Error("rope_scaling", "must be an object or null, got " + rs->dump());
  const Fields f(*rs, source, "rope_scaling.");
  std::string type;
  if (f.Has("rope_type")) {
    ASSIGN_OR_RETURN(type, f.String("rope_type"));
  } else if (f.Has("type")) {  // the older spelling
    ASSIGN_OR_RETURN(type, f.String("type"));
  } else {
    return f.Error("rope_type", "is required (\"yarn\" or \"default\")");
  }
  if (type == "default") {
    r = RopeScaling{};
    r.rope_type = "default";
    r.factor = 1.0;
    return absl::OkStatus();
  }
  if (type != "yarn") {
    return f.Error("rope_type", "'" + type + "' is not supported (supported: \"yarn\", \"default\")");
  }
  r.rope_type = "yarn";
  ASSIGN_OR_RETURN(r.factor, f.Number("factor", 1.0, false));
  ASSIGN_OR_RETURN(r.beta_fast, f.Number("beta_fast", 0.0, true, 32.0));
  ASSIGN_OR_RETURN(r.beta_slow, f.Number("beta_slow", 0.0, true, 1.0));
  if (r.beta_slow > r.beta_fast) {
    return f.Error("beta_slow", absl::StrCat("must not exceed beta_fast (", r.beta_fast, "), got ", r.beta_slow));
  }
  ASSIGN_OR_RETURN(r.original_max_position_embeddings,
                   f.Int("original_max_position_embeddings", 1, L::kMaxPositions, c.max_position_embeddings));
  ASSIGN_OR_RETURN(r.truncate, f.Bool("truncate", true));
  ASSIGN_OR_RETURN(r.mscale, f.Number("mscale", 0.0, false, 0.0));
  ASSIGN_OR_RETURN(r.mscale_all_dim, f.Number("mscale_all_dim", 0.0, false, 0.0));
  ASSIGN_OR_RETURN(r.attention_factor, f.Number("attention_factor", 0.0, false, 0.0));
  return absl::OkStatus();
}

// eos_token_id (an int or a list) and pad_token_id, each a token id of the vocabulary.
absl::Status ParseSpecialIds(const Fields& f, ModelConfig& c) {
  if (const json* eos = f.Find("eos_token_id"); eos != nullptr && !eos->is_null()) {
    auto check = [&](const json& v, const std::string& name) -> absl::Status {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() >= c.vocab_size) {
        return f.Error(name, absl::StrCat("must be a token id in [0, ", c.vocab_size, "), got ", v.dump()));
      }
      c.eos_token_ids.push_back(v.get<int>());
      return absl::OkStatus();
    };
    if (eos->is_array()) {
      if (eos->empty()) return f.Error("eos_token_id", "must not be an empty list");
      for (size_t i = 0; i < eos->size(); ++i) {
        RETURN_IF_ERROR(check((*eos)[i], absl::StrCat("eos_token_id[", i, "]")));
      }
    } else {
      RETURN_IF_ERROR(check(*eos, "eos_token_id"));
    }
  }
  ASSIGN_OR_RETURN(c.pad_token_id, f.Int32("pad_token_id", 0, c.vocab_size - 1, -1));
  return absl::OkStatus();
}

absl::StatusOr<ModelConfig> ParseDeepseekV3(const json& root, const std::string& source, ModelConfig c);

absl::StatusOr<ModelConfig> Parse(const std::string& text, const std::string& source) {
  // Bounded like client JSON: error messages dump values, and a deep one would recurse.
  absl::StatusOr<json> parsed = ParseBoundedJson<json>(text);
  if (!parsed.ok()) return absl::InvalidArgumentError(absl::StrCat(source, ": ", parsed.status().message()));
  json root = *std::move(parsed);
  if (!root.is_object()) return absl::InvalidArgumentError(source + ": not a JSON object");
  const Fields f(root, source);
  ModelConfig c;

  ASSIGN_OR_RETURN(c.model_type, f.String("model_type"));
  if (c.model_type == "deepseek_v3" || c.model_type == "kimi_k2") {
    return ParseDeepseekV3(root, source, std::move(c));
  }
  if (c.model_type != "gpt_oss") {
    return f.Error("model_type", "'" + c.model_type + "' is not supported (supported: \"gpt_oss\", \"deepseek_v3\", \"kimi_k2\")");
  }
  if (const json* a = f.Find("architectures"); a != nullptr && !a->is_null()) {
    if (!a->is_array() || a->empty() || !(*a)[0].is_string()) {
      return f.Error("architectures", "must be a non-empty list of strings, got " + a->dump());
    }
    c.architecture = (*a)[0].get<std::string>();
    if (c.architecture != "GptOssForCausalLM") {
      return f.Error("architectures", "'" + c.architecture + "' is not supported for model_type gpt_oss (expected \"GptOssForCausalLM\")");
    }
  } else {
    c.architecture = "GptOssForCausalLM";
  }

  // Sizes are required: GptOssConfig would default them to gpt-oss-120b's, which for a
  // checkpoint that forgot one is a silent wrong answer.
  ASSIGN_OR_RETURN(c.num_hidden_layers, f.Int32("num_hidden_layers", 1, L::kMaxLayers));
  ASSIGN_OR_RETURN(c.hidden_size, f.Int32("hidden_size", 1, L::kMaxHiddenSize));
  ASSIGN_OR_RETURN(c.intermediate_size, f.Int32("intermediate_size", 1, L::kMaxIntermediateSize));
  if (f.Has("num_local_experts")) {
    ASSIGN_OR_RETURN(c.num_local_experts, f.Int32("num_local_experts", 1, L::kMaxExperts));
    if (f.Has("num_experts")) {
      ASSIGN_OR_RETURN(int alias, f.Int32("num_experts", 1, L::kMaxExperts));
      if (alias != c.num_local_experts) {
        return f.Error("num_experts", absl::StrCat("(", alias, ") disagrees with num_local_experts (", c.num_local_experts, ")"));
      }
    }
  } else if (f.Has("num_experts")) {
    ASSIGN_OR_RETURN(c.num_local_experts, f.Int32("num_experts", 1, L::kMaxExperts));
  } else {
    return f.Error("num_local_experts", "is required (a positive integer; alias num_experts)");
  }
  if (f.Has("num_experts_per_tok") || !f.Has("experts_per_token")) {
    ASSIGN_OR_RETURN(c.num_experts_per_tok, f.Int32("num_experts_per_tok", 1, c.num_local_experts));
  } else {
    ASSIGN_OR_RETURN(c.num_experts_per_tok, f.Int32("experts_per_token", 1, c.num_local_experts));
  }
  if (f.Has("num_experts_per_tok") && f.Has("experts_per_token")) {
    ASSIGN_OR_RETURN(int alias, f.Int32("experts_per_token", 1, c.num_local_experts));
    if (alias != c.num_experts_per_tok) {
      return f.Error("experts_per_token", absl::StrCat("(", alias, ") disagrees with num_experts_per_tok (", c.num_experts_per_tok, ")"));
    }
  }
  ASSIGN_OR_RETURN(c.num_attention_heads, f.Int32("num_attention_heads", 1, L::kMaxHeads));
  ASSIGN_OR_RETURN(c.num_key_value_heads, f.Int32("num_key_value_heads", 1, c.num_attention_heads));
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    return f.Error("num_key_value_heads", absl::StrCat("(", c.num_key_value_heads, ") must divide num_attention_heads (", c.num_attention_heads, ")"));
  }
  if (f.Has("head_dim")) {
    ASSIGN_OR_RETURN(c.head_dim, f.Int32("head_dim", 1, L::kMaxHeadDim));
  } else {
    if (c.hidden_size % c.num_attention_heads != 0) {
      return f.Error("head_dim", absl::StrCat("is absent and hidden_size (", c.hidden_size, ") is not a multiple of num_attention_heads (", c.num_attention_heads, ")"));
    }
    c.head_dim = c.hidden_size / c.num_attention_heads;
    if (c.head_dim > L::kMaxHeadDim) {
      return f.Error("head_dim", absl::StrCat("is absent and hidden_size / num_attention_heads (", c.head_dim, ") exceeds ", L::kMaxHeadDim));
    }
  }
  if (c.head_dim % 2 != 0) return f.Error("head_dim", absl::StrCat("must be even (RoPE rotates pairs), got ", c.head_dim));
  ASSIGN_OR_RETURN(c.vocab_size, f.Int32("vocab_size", 1, L::kMaxVocab));
  ASSIGN_OR_RETURN(c.sliding_window, f.Int32("sliding_window", 1, L::kMaxPositions, 128));
  ASSIGN_OR_RETURN(c.max_position_embeddings, f.Int("max_position_embeddings", 1, L::kMaxPositions, 131072));
  ASSIGN_OR_RETURN(c.rope_theta, f.Number("rope_theta", 0.0, true, 150000.0));
  RETURN_IF_ERROR(ParseRopeScaling(root, source, c));
  ASSIGN_OR_RETURN(c.rms_norm_eps, f.Number("rms_norm_eps", 0.0, true, 1e-5));
  ASSIGN_OR_RETURN(c.swiglu_limit, f.Number("swiglu_limit", 0.0, true, 7.0));
  ASSIGN_OR_RETURN(c.swiglu_alpha, f.Number("swiglu_alpha", 0.0, true, 1.702));
  ASSIGN_OR_RETURN(c.attention_bias, f.Bool("attention_bias", true));
  ASSIGN_OR_RETURN(c.tie_word_embeddings, f.Bool("tie_word_embeddings", false));

  if (const json* lt = f.Find("layer_types"); lt != nullptr && !lt->is_null()) {
    if (!lt->is_array()) return f.Error("layer_types", "must be a list of strings, got " + lt->dump());
    if (static_cast<int64_t>(lt->size()) != c.num_hidden_layers) {
      return f.Error("layer_types", absl::StrCat("has ", lt->size(), " entries but num_hidden_layers is ", c.num_hidden_layers));
    }
    for (size_t i = 0; i < lt->size(); ++i) {
      const json& t = (*lt)[i];
      if (!t.is_string() || (t != "sliding_attention" && t != "full_attention")) {
        return f.Error(absl::StrCat("layer_types[", i, "]"), "must be \"sliding_attention\" or \"full_attention\", got " + t.dump());
      }
      c.layer_types.push_back(t.get<std::string>());
    }
  } else {
    // GptOssConfig: even layers slide, odd layers are full.
    for (int i = 0; i < c.num_hidden_layers; ++i) {
      c.layer_types.push_back(i % 2 == 0 ? "sliding_attention" : "full_attention");
    }
  }

  RETURN_IF_ERROR(ParseSpecialIds(f, c));

  if (const json* q = f.Find("quantization_config"); q != nullptr && !q->is_null()) {
    if (!q->is_object()) return f.Error("quantization_config", "must be an object, got " + q->dump());
    const Fields qf(*q, source, "quantization_config.");
    ASSIGN_OR_RETURN(c.quant_method, qf.String("quant_method"));
    if (c.quant_method != "mxfp4") {
      return qf.Error("quant_method", "'" + c.quant_method + "' is not supported (supported: \"mxfp4\")");
    }
    if (c.hidden_size % 32 != 0) {
      return f.Error("hidden_size", absl::StrCat("must be a multiple of 32 for mxfp4 experts, got ", c.hidden_size));
    }
    if (c.intermediate_size % 32 != 0) {
      return f.Error("intermediate_size", absl::StrCat("must be a multiple of 32 for mxfp4 experts, got ", c.intermediate_size));
    }
  }
  return c;
}


// DeepseekV3Config (model_type deepseek_v3, and kimi_k2 which is the same architecture). As for
// gpt-oss, every size and routing constant is required: HF's defaults are DeepSeek-V3's own
// sizes, a silent wrong answer for any other checkpoint. Only what this runner implements is
// accepted (sigmoid noaux_tc routing, silu experts, MoE in every layer after the dense ones).
absl::StatusOr<ModelConfig> ParseDeepseekV3(const json& root, const std::string& source,
                                            ModelConfig c) {
  const Fields f(root, source);
  c.architecture = "DeepseekV3ForCausalLM";
  if (const json* a = f.Find("architectures"); a != nullptr && !a->is_null()) {
    if (!a->is_array() || a->empty() || !(*a)[0].is_string()) {
      return f.Error("architectures", "must be a non-empty list of strings, got " + a->dump());
    }
    if ((*a)[0].get<std::string>() != c.architecture) {
      return f.Error("architectures", "'" + (*a)[0].get<std::string>() + "' is not supported for model_type " + c.model_type + " (expected \"DeepseekV3ForCausalLM\")");
    }
  }
  auto must_be = [&](std::string_view name, const std::string& want) -> absl::Status {
    if (!f.Has(name) || f.IsNull(name)) return absl::OkStatus();
    ASSIGN_OR_RETURN(std::string v, f.String(name));
    if (v != want) return f.Error(name, "'" + v + "' is not supported (supported: \"" + want + "\")");
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(must_be("scoring_func", "sigmoid"));
  RETURN_IF_ERROR(must_be("topk_method", "noaux_tc"));
  RETURN_IF_ERROR(must_be("hidden_act", "silu"));
  ASSIGN_OR_RETURN(c.num_hidden_layers, f.Int32("num_hidden_layers", 1, L::kMaxLayers));
  ASSIGN_OR_RETURN(c.hidden_size, f.Int32("hidden_size", 1, L::kMaxHiddenSize));
  ASSIGN_OR_RETURN(c.dense_intermediate_size, f.Int32("intermediate_size", 1, L::kMaxIntermediateSize));
  ASSIGN_OR_RETURN(c.intermediate_size, f.Int32("moe_intermediate_size", 1, L::kMaxIntermediateSize));
  ASSIGN_OR_RETURN(c.num_local_experts, f.Int32("n_routed_experts", 1, L::kMaxExperts));
  ASSIGN_OR_RETURN(c.num_experts_per_tok, f.Int32("num_experts_per_tok", 1, c.num_local_experts));
  ASSIGN_OR_RETURN(c.n_shared_experts, f.Int32("n_shared_experts", 0, 64));
  ASSIGN_OR_RETURN(c.n_group, f.Int32("n_group", 1, c.num_local_experts));
  if (c.num_local_experts % c.n_group != 0) {
    return f.Error("n_group", absl::StrCat("(", c.n_group, ") must divide n_routed_experts (", c.num_local_experts, ")"));
  }
  if (c.n_group > 1 && c.num_local_experts / c.n_group < 2) {
    return f.Error("n_group", absl::StrCat("(", c.n_group, ") leaves fewer than 2 experts per group (a group scores by its top 2)"));
  }
  ASSIGN_OR_RETURN(c.topk_group, f.Int32("topk_group", 1, c.n_group));
  if (c.num_experts_per_tok > c.topk_group * (c.num_local_experts / c.n_group)) {
    return f.Error("num_experts_per_tok", absl::StrCat("(", c.num_experts_per_tok, ") exceeds the experts of topk_group (", c.topk_group, ") groups"));
  }
  ASSIGN_OR_RETURN(c.first_k_dense_replace, f.Int32("first_k_dense_replace", 0, c.num_hidden_layers));
  ASSIGN_OR_RETURN(int freq, f.Int32("moe_layer_freq", 1, L::kMaxLayers, 1));
  if (freq != 1) return f.Error("moe_layer_freq", absl::StrCat("must be 1 (HF ignores it; every layer after the dense ones is MoE), got ", freq));
  ASSIGN_OR_RETURN(c.norm_topk_prob, f.Bool("norm_topk_prob", true));
  ASSIGN_OR_RETURN(c.routed_scaling_factor, f.Number("routed_scaling_factor", 0.0, true));
  ASSIGN_OR_RETURN(c.num_attention_heads, f.Int32("num_attention_heads", 1, L::kMaxHeads));
  c.num_key_value_heads = c.num_attention_heads;  // MLA: every head has its own K/V after kv_b_proj
  if (!f.Has("q_lora_rank")) return f.Error("q_lora_rank", "is required (a positive integer, or null for a plain q_proj)");
  ASSIGN_OR_RETURN(c.q_lora_rank, f.Int32("q_lora_rank", 1, L::kMaxHiddenSize, 0));
  ASSIGN_OR_RETURN(c.kv_lora_rank, f.Int32("kv_lora_rank", 1, L::kMaxHiddenSize));
  ASSIGN_OR_RETURN(c.qk_nope_head_dim, f.Int32("qk_nope_head_dim", 1, L::kMaxHeadDim));
  ASSIGN_OR_RETURN(c.qk_rope_head_dim, f.Int32("qk_rope_head_dim", 1, L::kMaxHeadDim));
  if (c.qk_rope_head_dim % 2 != 0) return f.Error("qk_rope_head_dim", absl::StrCat("must be even (RoPE rotates pairs), got ", c.qk_rope_head_dim));
  ASSIGN_OR_RETURN(c.v_head_dim, f.Int32("v_head_dim", 1, L::kMaxHeadDim));
  c.head_dim = c.qk_rope_head_dim;
  ASSIGN_OR_RETURN(c.vocab_size, f.Int32("vocab_size", 1, L::kMaxVocab));
  ASSIGN_OR_RETURN(c.max_position_embeddings, f.Int("max_position_embeddings", 1, L::kMaxPositions, 4096));
  ASSIGN_OR_RETURN(c.rope_theta, f.Number("rope_theta", 0.0, true, 10000.0));
  if (f.Has("rope_scaling") && !f.IsNull("rope_scaling")) {
    RETURN_IF_ERROR(ParseRopeScaling(root, source, c));
  } else {
    c.rope_scaling = RopeScaling{};
    c.rope_scaling.rope_type = "default";
  }
  ASSIGN_OR_RETURN(c.rope_interleave, f.Bool("rope_interleave", true));
  ASSIGN_OR_RETURN(c.rms_norm_eps, f.Number("rms_norm_eps", 0.0, true, 1e-6));
  ASSIGN_OR_RETURN(c.attention_bias, f.Bool("attention_bias", false));
  if (c.attention_bias) return f.Error("attention_bias", "must be false (DeepSeek-V3 attention has no biases)");
  ASSIGN_OR_RETURN(c.tie_word_embeddings, f.Bool("tie_word_embeddings", false));
  c.sliding_window = 0;
  c.layer_types.assign(c.num_hidden_layers, "full_attention");
  RETURN_IF_ERROR(ParseSpecialIds(f, c));
  if (const json* q = f.Find("quantization_config"); q != nullptr && !q->is_null()) {
    return f.Error("quantization_config", "is not supported for " + c.model_type + " yet (routed experts are read as bf16 and quantized to MXFP4 at load)");
  }
  // Routed experts become MXFP4 at load: rows of 32-element blocks.
  if (c.hidden_size % 32 != 0) {
    return f.Error("hidden_size", absl::StrCat("must be a multiple of 32 for mxfp4 experts, got ", c.hidden_size));
  }
  if (c.intermediate_size % 32 != 0) {
    return f.Error("moe_intermediate_size", absl::StrCat("must be a multiple of 32 for mxfp4 experts, got ", c.intermediate_size));
  }
  return c;
}

}  // namespace

absl::StatusOr<ModelConfig> ModelConfig::FromJsonText(const std::string& text) {
  return Parse(text, "config.json");
}

absl::StatusOr<ModelConfig> ModelConfig::Load(const std::string& model_dir) {
  const std::string path = (std::filesystem::path(model_dir) / "config.json").string();
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot read"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return Parse(text, path);
}

}  // namespace mxserve
