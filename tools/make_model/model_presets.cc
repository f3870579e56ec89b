#include "tools/make_model/model_presets.h"

#include "absl/strings/str_cat.h"

namespace mxserve::make_model {

std::vector<std::string> AlternatingLayerTypes(int num_layers) {
  std::vector<std::string> t;
  for (int i = 0; i < num_layers; ++i) t.push_back(i % 2 == 0 ? "sliding_attention" : "full_attention");
  return t;
}

namespace {

ModelConfig GptOss(int layers, int experts) {
  ModelConfig c;
  c.model_type = "gpt_oss";
  c.architecture = "GptOssForCausalLM";
  c.num_hidden_layers = layers;
  c.hidden_size = 2880;
  c.intermediate_size = 2880;
  c.num_local_experts = experts;
  c.num_experts_per_tok = 4;
  c.num_attention_heads = 64;
  c.num_key_value_heads = 8;
  c.head_dim = 64;
  c.vocab_size = 201088;
  c.sliding_window = 128;
  c.layer_types = AlternatingLayerTypes(layers);
  c.max_position_embeddings = 131072;
  c.rope_theta = 150000.0;
  c.rope_scaling = RopeScaling{"yarn", 32.0, 32.0, 1.0, 4096, false};
  c.rms_norm_eps = 1e-5;
  c.swiglu_limit = 7.0;
  c.attention_bias = true;
  c.tie_word_embeddings = false;
  c.eos_token_ids = {200002};
  c.pad_token_id = 199999;
  c.quant_method = "mxfp4";
  return c;
}

// A tiny DeepSeek-V3-shaped model (docs/MODELS.md, DeepSeek-V3 and Kimi K2): q_lora set, four
// expert groups of which two are kept, one dense layer, one shared expert, YaRN x4 over 128.
ModelConfig DeepseekTiny() {
  ModelConfig c;
  c.model_type = "deepseek_v3";
  c.architecture = "DeepseekV3ForCausalLM";
  c.num_hidden_layers = 3;
  c.first_k_dense_replace = 1;
  c.hidden_size = 64;
  c.dense_intermediate_size = 96;
  c.intermediate_size = 32;
  c.num_local_experts = 8;
  c.num_experts_per_tok = 3;
  c.n_group = 4;
  c.topk_group = 2;
  c.n_shared_experts = 1;
  c.norm_topk_prob = true;
  c.routed_scaling_factor = 2.5;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 4;
  c.q_lora_rank = 32;
  c.kv_lora_rank = 32;
  c.qk_nope_head_dim = 16;
  c.qk_rope_head_dim = 8;
  c.head_dim = 8;
  c.v_head_dim = 16;
  c.layer_types.assign(3, "full_attention");
  c.max_position_embeddings = 512;
  c.rope_theta = 10000.0;
  c.rope_scaling = RopeScaling{"yarn", 4.0, 32.0, 1.0, 128, true, 1.0, 1.0, 0.0};
  c.rms_norm_eps = 1e-6;
  c.attention_bias = false;
  return c;
}

}  // namespace

absl::StatusOr<Preset> GetPreset(const std::string& name) {
  Preset p;
  if (name == "deepseek-tiny" || name == "kimi-k2-tiny") {
    ModelConfig c = DeepseekTiny();
    if (name == "kimi-k2-tiny") {  // K2's choices: plain q_proj, one group, its RoPE and scale
      c.model_type = "kimi_k2";
      c.q_lora_rank = 0;
      c.n_group = 1;
      c.topk_group = 1;
      c.rope_theta = 50000.0;
      c.rope_scaling = RopeScaling{"yarn", 32.0, 1.0, 1.0, 128, true, 1.0, 1.0, 0.0};
      c.max_position_embeddings = 4096;
      c.routed_scaling_factor = 2.827;
    }
    p.config = c;
    p.num_merges = 700;
    p.vocab_from_tokenizer = true;
    p.default_shards = 1;
    return p;
  }
  if (name == "tiny") {
    ModelConfig c = GptOss(4, 8);
    c.hidden_size = 64;
    c.intermediate_size = 64;
    c.num_experts_per_tok = 4;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.head_dim = 16;
    c.sliding_window = 8;
    c.max_position_embeddings = 4096;
    // original_max_position_embeddings * factor == max_position_embeddings, as in gpt-oss
    // (4096 * 32 = 131072): some HF versions derive the YaRN factor from that ratio and others
    // use `factor`, and they agree only when the two match.
    c.rope_scaling = RopeScaling{"yarn", 32.0, 32.0, 1.0, 128, false};
    p.config = c;
    p.num_merges = 700;
    p.vocab_from_tokenizer = true;
    p.default_shards = 1;
    return p;
  }
  if (name == "gpt-oss-20b" || name == "gpt-oss-120b") {
    const bool big = name == "gpt-oss-120b";
    p.config = GptOss(big ? 36 : 24, big ? 128 : 32);
    p.num_merges = 700;
    p.vocab_from_tokenizer = false;
    p.default_shards = 0;
    return p;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown preset '", name, "' (known: tiny, gpt-oss-20b, gpt-oss-120b, deepseek-tiny, kimi-k2-tiny)"));
}

}  // namespace mxserve::make_model
