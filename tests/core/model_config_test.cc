#include "core/model_config.h"

#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/core/temp_dir.h"

namespace mxserve {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;

// openai/gpt-oss-20b config.json (huggingface.co/openai/gpt-oss-20b).
const char* kGptOss20b = R"({
  "architectures": ["GptOssForCausalLM"],
  "attention_bias": true,
  "attention_dropout": 0.0,
  "eos_token_id": 200002,
  "experts_per_token": 4,
  "head_dim": 64,
  "hidden_act": "silu",
  "hidden_size": 2880,
  "initial_context_length": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 2880,
  "layer_types": [
    "sliding_attention", "full_attention", "sliding_attention", "full_attention",
    "sliding_attention", "full_attention", "sliding_attention", "full_attention",
    "sliding_attention", "full_attention", "sliding_attention", "full_attention",
    "sliding_attention", "full_attention", "sliding_attention", "full_attention",
    "sliding_attention", "full_attention", "sliding_attention", "full_attention",
    "sliding_attention", "full_attention", "sliding_attention", "full_attention"
  ],
  "max_position_embeddings": 131072,
  "model_type": "gpt_oss",
  "num_attention_heads": 64,
  "num_experts_per_tok": 4,
  "num_hidden_layers": 24,
  "num_key_value_heads": 8,
  "num_local_experts": 32,
  "output_router_logits": false,
  "pad_token_id": 199999,
  "quantization_config": {
    "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                               "model.embed_tokens", "lm_head"],
    "quant_method": "mxfp4"
  },
  "rms_norm_eps": 1e-05,
  "rope_scaling": {
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "factor": 32.0,
    "original_max_position_embeddings": 4096,
    "rope_type": "yarn",
    "truncate": false
  },
  "rope_theta": 150000,
  "router_aux_loss_coef": 0.9,
  "sliding_window": 128,
  "swiglu_limit": 7.0,
  "tie_word_embeddings": false,
  "transformers_version": "4.55.0.dev0",
  "use_cache": true,
  "vocab_size": 201088
})";

std::string Message(const absl::Status& s) { return std::string(s.message()); }

TEST(ModelConfig, GptOss20b) {
  auto c = ModelConfig::FromJsonText(kGptOss20b);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->model_type, "gpt_oss");
  EXPECT_EQ(c->architecture, "GptOssForCausalLM");
  EXPECT_EQ(c->num_hidden_layers, 24);
  EXPECT_EQ(c->hidden_size, 2880);
  EXPECT_EQ(c->intermediate_size, 2880);
  EXPECT_EQ(c->num_local_experts, 32);
  EXPECT_EQ(c->num_experts_per_tok, 4);
  EXPECT_EQ(c->num_attention_heads, 64);
  EXPECT_EQ(c->num_key_value_heads, 8);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->vocab_size, 201088);
  EXPECT_EQ(c->sliding_window, 128);
  ASSERT_EQ(c->layer_types.size(), 24u);
  EXPECT_TRUE(c->IsSlidingLayer(0));
  EXPECT_FALSE(c->IsSlidingLayer(1));
  EXPECT_TRUE(c->IsSlidingLayer(22));
  EXPECT_FALSE(c->IsSlidingLayer(23));
  EXPECT_EQ(c->max_position_embeddings, 131072);
  EXPECT_EQ(c->rope_theta, 150000.0);
  EXPECT_EQ(c->rope_scaling.rope_type, "yarn");
  EXPECT_EQ(c->rope_scaling.factor, 32.0);
  EXPECT_EQ(c->rope_scaling.beta_fast, 32.0);
  EXPECT_EQ(c->rope_scaling.beta_slow, 1.0);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 4096);
  EXPECT_FALSE(c->rope_scaling.truncate);
  EXPECT_DOUBLE_EQ(c->rms_norm_eps, 1e-5);
  EXPECT_EQ(c->swiglu_limit, 7.0);
  EXPECT_DOUBLE_EQ(c->swiglu_alpha, 1.702);
  EXPECT_TRUE(c->attention_bias);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_EQ(c->eos_token_ids, std::vector<int>{200002});
  EXPECT_EQ(c->pad_token_id, 199999);
  EXPECT_EQ(c->quant_method, "mxfp4");
}

json Base() { return json::parse(kGptOss20b); }

absl::StatusOr<ModelConfig> Parse(const json& j) { return ModelConfig::FromJsonText(j.dump()); }

TEST(ModelConfig, LoadFromDirectoryNamesThePath) {
  testing::TempDir dir;
  dir.WriteFile("config.json", kGptOss20b);
  auto c = ModelConfig::Load(dir.path());
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->num_local_experts, 32);
  json j = Base();
  j["hidden_size"] = -1;
  dir.WriteFile("config.json", j.dump());
  auto bad = ModelConfig::Load(dir.path());
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(Message(bad.status()), HasSubstr(dir.Join("config.json") + ": field 'hidden_size'"));
  testing::TempDir empty;
  EXPECT_EQ(ModelConfig::Load(empty.path()).status().code(), absl::StatusCode::kNotFound);
}

TEST(ModelConfig, DefaultsAndAliases) {
  json j = Base();
  j.erase("layer_types");
  j.erase("head_dim");
  j.erase("rope_scaling");
  j.erase("swiglu_limit");
  j.erase("sliding_window");
  j["num_experts"] = j["num_local_experts"];
  j.erase("num_local_experts");
  j["eos_token_id"] = json::array({200002, 199999});
  j["hidden_size"] = 4096;  // head_dim default = hidden / heads = 64
  auto c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  ASSERT_EQ(c->layer_types.size(), 24u);
  for (int i = 0; i < 24; ++i) EXPECT_EQ(c->IsSlidingLayer(i), i % 2 == 0) << i;
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->num_local_experts, 32);
  EXPECT_EQ(c->rope_scaling.rope_type, "yarn");
  EXPECT_EQ(c->rope_scaling.factor, 32.0);
  EXPECT_FALSE(c->rope_scaling.truncate);
  EXPECT_EQ(c->swiglu_limit, 7.0);
  EXPECT_EQ(c->sliding_window, 128);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int>{200002, 199999}));

  // truncate defaults to true when the dict lacks it; original_max defaults to max_position.
  j = Base();
  j["rope_scaling"].erase("truncate");
  j["rope_scaling"].erase("original_max_position_embeddings");
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->rope_scaling.truncate);
  EXPECT_EQ(c->rope_scaling.original_max_position_embeddings, 131072);

  j = Base();
  j["rope_scaling"] = nullptr;
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->rope_scaling.rope_type, "default");

  j = Base();
  j.erase("quantization_config");
  c = Parse(j);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->quant_method, "");
}

struct Bad {
  std::string field;  // the field the error must name
  std::function<void(json&)> edit;
};

TEST(ModelConfig, EachMissingOrWrongFieldIsNamed) {
  const std::vector<Bad> cases = {
      {"model_type", [](json& j) { j.erase("model_type"); }},
      {"model_type", [](json& j) { j["model_type"] = "llama"; }},
      {"architectures", [](json& j) { j["architectures"] = "GptOssForCausalLM"; }},
      {"num_hidden_layers", [](json& j) { j.erase("num_hidden_layers"); }},
      {"num_hidden_layers", [](json& j) { j["num_hidden_layers"] = 0; }},
      {"hidden_size", [](json& j) { j.erase("hidden_size"); }},
      {"hidden_size", [](json& j) { j["hidden_size"] = "2880"; }},
      {"hidden_size", [](json& j) { j["hidden_size"] = -5; }},
      {"hidden_size", [](json& j) { j["hidden_size"] = 2881; }},  // not a multiple of 32 (mxfp4)
      {"intermediate_size", [](json& j) { j.erase("intermediate_size"); }},
      {"intermediate_size", [](json& j) { j["intermediate_size"] = 2.5; }},
      {"num_local_experts", [](json& j) { j.erase("num_local_experts"); }},
      {"num_experts", [](json& j) { j["num_experts"] = 8; }},
      {"num_experts_per_tok", [](json& j) { j.erase("num_experts_per_tok"); j.erase("experts_per_token"); }},
      {"num_experts_per_tok", [](json& j) { j["num_experts_per_tok"] = 33; }},
      {"experts_per_token", [](json& j) { j["experts_per_token"] = 2; }},
      {"num_attention_heads", [](json& j) { j.erase("num_attention_heads"); }},
      {"num_key_value_heads", [](json& j) { j["num_key_value_heads"] = 7; }},
      {"num_key_value_heads", [](json& j) { j.erase("num_key_value_heads"); }},
      {"head_dim", [](json& j) { j["head_dim"] = 0; }},
      {"head_dim", [](json& j) { j["head_dim"] = 63; }},
      {"vocab_size", [](json& j) { j.erase("vocab_size"); }},
      {"sliding_window", [](json& j) { j["sliding_window"] = -1; }},
      {"layer_types", [](json& j) { j["layer_types"].erase(0); }},
      {"layer_types[3]", [](json& j) { j["layer_types"][3] = "chunked_attention"; }},
      {"max_position_embeddings", [](json& j) { j["max_position_embeddings"] = "big"; }},
      {"rope_theta", [](json& j) { j["rope_theta"] = 0; }},
      {"rope_scaling", [](json& j) { j["rope_scaling"] = 32; }},
      {"rope_scaling.rope_type", [](json& j) { j["rope_scaling"]["rope_type"] = "llama3"; }},
      {"rope_scaling.rope_type", [](json& j) { j["rope_scaling"].erase("rope_type"); }},
      {"rope_scaling.factor", [](json& j) { j["rope_scaling"].erase("factor"); }},
      {"rope_scaling.factor", [](json& j) { j["rope_scaling"]["factor"] = 0.5; }},
      {"rope_scaling.beta_fast", [](json& j) { j["rope_scaling"]["beta_fast"] = "x"; }},
      {"rope_scaling.truncate", [](json& j) { j["rope_scaling"]["truncate"] = "no"; }},
      {"rope_scaling.original_max_position_embeddings",
       [](json& j) { j["rope_scaling"]["original_max_position_embeddings"] = 0; }},
      {"rms_norm_eps", [](json& j) { j["rms_norm_eps"] = 0; }},
      {"swiglu_limit", [](json& j) { j["swiglu_limit"] = -7; }},
      {"attention_bias", [](json& j) { j["attention_bias"] = 1; }},
      {"tie_word_embeddings", [](json& j) { j["tie_word_embeddings"] = "false"; }},
      {"eos_token_id", [](json& j) { j["eos_token_id"] = 201088; }},
      {"eos_token_id", [](json& j) { j["eos_token_id"] = "200002"; }},
      {"eos_token_id[1]", [](json& j) { j["eos_token_id"] = json::array({1, -1}); }},
      {"pad_token_id", [](json& j) { j["pad_token_id"] = 1e9; }},
      {"quantization_config", [](json& j) { j["quantization_config"] = "mxfp4"; }},
      {"quantization_config.quant_method", [](json& j) { j["quantization_config"].erase("quant_method"); }},
      {"quantization_config.quant_method", [](json& j) { j["quantization_config"]["quant_method"] = "fp8"; }},
  };
  for (const Bad& b : cases) {
    json j = Base();
    b.edit(j);
    auto c = Parse(j);
    ASSERT_FALSE(c.ok()) << "edit for " << b.field << " was accepted";
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(Message(c.status()), HasSubstr("config.json: field '" + b.field + "'"));
  }
}

TEST(ModelConfig, MessageForAMissingSize) {
  json j = Base();
  j["hidden_size"] = 0;
  EXPECT_EQ(Message(Parse(j).status()), "config.json: field 'hidden_size' must be an integer in [1, 65536], got 0");
}

// Every dimension has an upper bound: the values that made the process die in std::bad_alloc
// (vocab_size or num_local_experts of 2^31-1, heads and head_dim of 2^30) and one past each
// limit are refused naming the field; the limit itself is accepted.
TEST(ModelConfig, EveryDimensionIsBounded) {
  using L = ModelLimits;
  struct Dim {
    const char* field;
    int64_t limit;
  };
  const Dim dims[] = {{"num_hidden_layers", L::kMaxLayers},
                      {"hidden_size", L::kMaxHiddenSize},
                      {"intermediate_size", L::kMaxIntermediateSize},
                      {"num_local_experts", L::kMaxExperts},
                      {"num_attention_heads", L::kMaxHeads},
                      {"head_dim", L::kMaxHeadDim},
                      {"vocab_size", L::kMaxVocab},
                      {"sliding_window", L::kMaxPositions},
                      {"max_position_embeddings", L::kMaxPositions}};
  for (const Dim& d : dims) {
    for (int64_t v : {d.limit + 1, int64_t{1} << 30, int64_t{INT32_MAX}, int64_t{1} << 40}) {
      json j = Base();
      j.erase("layer_types");
      j[d.field] = v;
      auto c = Parse(j);
      ASSERT_FALSE(c.ok()) << d.field << " = " << v;
      EXPECT_THAT(Message(c.status()), HasSubstr("field '" + std::string(d.field) + "'"));
    }
    json j = Base();
    j.erase("layer_types");
    j[d.field] = d.limit;
    auto c = Parse(j);
    EXPECT_TRUE(c.ok()) << d.field << " = " << d.limit << ": " << c.status();
  }
  json heads = Base();
  heads["num_attention_heads"] = 1 << 30;
  heads["head_dim"] = 1 << 30;
  EXPECT_THAT(Message(Parse(heads).status()), HasSubstr("field 'num_attention_heads'"));
  json derived = Base();  // head_dim from hidden_size / heads: bounded too
  derived.erase("head_dim");
  derived["hidden_size"] = L::kMaxHiddenSize;
  derived["num_attention_heads"] = 8;
  EXPECT_THAT(Message(Parse(derived).status()), HasSubstr("field 'head_dim'"));
  json rope = Base();
  rope["rope_scaling"]["original_max_position_embeddings"] = L::kMaxPositions + 1;
  EXPECT_THAT(Message(Parse(rope).status()),
              HasSubstr("field 'rope_scaling.original_max_position_embeddings'"));
}

TEST(ModelConfig, DeepOrRepeatedJsonIsRefused) {
  std::string deep = kGptOss20b;
  deep.insert(deep.rfind('}'), ", \"extra\": " + std::string(100000, '[') + std::string(100000, ']'));
  EXPECT_THAT(Message(ModelConfig::FromJsonText(deep).status()), HasSubstr("deeper than 64"));
  std::string twice = kGptOss20b;
  twice.insert(twice.rfind('}'), ", \"vocab_size\": 7");
  EXPECT_THAT(Message(ModelConfig::FromJsonText(twice).status()),
              HasSubstr("duplicate key \"vocab_size\""));
}

TEST(ModelConfig, NotJson) {
  EXPECT_FALSE(ModelConfig::FromJsonText("{").ok());
  EXPECT_FALSE(ModelConfig::FromJsonText("[]").ok());
  EXPECT_FALSE(ModelConfig::FromJsonText("").ok());
}

}  // namespace
}  // namespace mxserve
