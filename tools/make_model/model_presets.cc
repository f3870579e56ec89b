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

}  // namespace

absl::StatusOr<Preset> GetPreset(const std::string& name) {
  Preset p;
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
      absl::StrCat("unknown preset '", name, "' (known: tiny, gpt-oss-20b, gpt-oss-120b)"));
}

}  // namespace mxserve::make_model
