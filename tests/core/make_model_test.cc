// mxserve-make-model: the tiny preset written into a temp dir reads back through the real
// config parser and checkpoint reader with exactly the gpt-oss tensor set.
#include "tools/make_model/make_model.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/bf16.h"
#include "core/model_config.h"
#include "core/mxfp4.h"
#include "core/safetensors.h"
#include "tests/core/temp_dir.h"
#include "tools/tiny_tokenizer/tiny_tokenizer.h"

namespace mxserve {
namespace {

using make_model::MakeModel;
using make_model::MakeModelOptions;
using testing::TempDir;

struct Expected {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
};

// The gpt-oss HF tensor set (docs/MODELS.md), written out independently of the tool.
std::vector<Expected> ExpectedTensors(const ModelConfig& c) {
  const int64_t H = c.hidden_size, I = c.intermediate_size, E = c.num_local_experts;
  const int64_t V = c.vocab_size, Q = int64_t{c.num_attention_heads} * c.head_dim;
  const int64_t KV = int64_t{c.num_key_value_heads} * c.head_dim;
  std::vector<Expected> t = {{"model.embed_tokens.weight", DType::kBF16, {V, H}},
                             {"model.norm.weight", DType::kBF16, {H}},
                             {"lm_head.weight", DType::kBF16, {V, H}}};
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const std::vector<Expected> layer = {
        {p + "input_layernorm.weight", DType::kBF16, {H}},
        {p + "post_attention_layernorm.weight", DType::kBF16, {H}},
        {p + "self_attn.q_proj.weight", DType::kBF16, {Q, H}},
        {p + "self_attn.q_proj.bias", DType::kBF16, {Q}},
        {p + "self_attn.k_proj.weight", DType::kBF16, {KV, H}},
        {p + "self_attn.k_proj.bias", DType::kBF16, {KV}},
        {p + "self_attn.v_proj.weight", DType::kBF16, {KV, H}},
        {p + "self_attn.v_proj.bias", DType::kBF16, {KV}},
        {p + "self_attn.o_proj.weight", DType::kBF16, {H, Q}},
        {p + "self_attn.o_proj.bias", DType::kBF16, {H}},
        {p + "self_attn.sinks", DType::kBF16, {c.num_attention_heads}},
        {p + "mlp.router.weight", DType::kBF16, {E, H}},
        {p + "mlp.router.bias", DType::kBF16, {E}},
        {p + "mlp.experts.gate_up_proj_blocks", DType::kU8, {E, 2 * I, H / 32, 16}},
        {p + "mlp.experts.gate_up_proj_scales", DType::kU8, {E, 2 * I, H / 32}},
        {p + "mlp.experts.gate_up_proj_bias", DType::kBF16, {E, 2 * I}},
        {p + "mlp.experts.down_proj_blocks", DType::kU8, {E, H, I / 32, 16}},
        {p + "mlp.experts.down_proj_scales", DType::kU8, {E, H, I / 32}},
        {p + "mlp.experts.down_proj_bias", DType::kBF16, {E, H}},
    };
    t.insert(t.end(), layer.begin(), layer.end());
  }
  return t;
}

absl::Status Make(const std::string& dir, uint64_t seed, int shards, int layers = 0) {
  MakeModelOptions o;
  o.preset = "tiny";
  o.out_dir = dir;
  o.seed = seed;
  o.shards = shards;
  o.num_layers = layers;
  o.threads = 2;
  return MakeModel(o);
}

std::vector<float> Bf16Values(const TensorView& t) {
  std::vector<float> v(t.numel());
  for (size_t i = 0; i < v.size(); ++i) {
    uint16_t h;
    std::memcpy(&h, t.data + 2 * i, 2);
    v[i] = Bf16ToFloat(h);
  }
  return v;
}

TEST(MakeModel, TinyPresetHasTheGptOssLayout) {
  TempDir dir;
  ASSERT_TRUE(Make(dir.path(), 7, -1).ok());
  auto cfg = ModelConfig::Load(dir.path());
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  const ModelConfig& c = *cfg;
  EXPECT_EQ(c.architecture, "GptOssForCausalLM");
  EXPECT_EQ(c.model_type, "gpt_oss");
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.intermediate_size, 64);
  EXPECT_EQ(c.num_hidden_layers, 4);
  EXPECT_EQ(c.layer_types, (std::vector<std::string>{"sliding_attention", "full_attention",
                                                      "sliding_attention", "full_attention"}));
  EXPECT_EQ(c.num_local_experts, 8);
  EXPECT_EQ(c.num_experts_per_tok, 4);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.sliding_window, 8);
  EXPECT_EQ(c.max_position_embeddings, 4096);
  EXPECT_EQ(c.rope_theta, 150000.0);
  EXPECT_EQ(c.rope_scaling.rope_type, "yarn");
  EXPECT_EQ(c.rope_scaling.factor, 32.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings * 32, c.max_position_embeddings);
  EXPECT_FALSE(c.rope_scaling.truncate);
  EXPECT_EQ(c.swiglu_limit, 7.0);
  EXPECT_EQ(c.quant_method, "mxfp4");

  // vocab/eos/pad are the tokenizer's, and the tokenizer files are there.
  auto tok = MakeTinyTokenizer(700);
  ASSERT_TRUE(tok.ok());
  EXPECT_EQ(c.vocab_size, tok->vocab_size);
  EXPECT_EQ(c.eos_token_ids, std::vector<int>{tok->eos_token_id});
  EXPECT_EQ(c.pad_token_id, tok->pad_token_id);
  EXPECT_EQ(dir.ReadFile("tokenizer.json"), tok->tokenizer_json);
  EXPECT_EQ(dir.ReadFile("tokenizer_config.json"), tok->tokenizer_config_json);
  auto raw = nlohmann::json::parse(dir.ReadFile("config.json"));
  EXPECT_EQ(raw["quantization_config"]["modules_to_not_convert"].size(), 4u);
  EXPECT_EQ(raw["architectures"][0], "GptOssForCausalLM");

  auto ck = Checkpoint::Open(dir.path());
  ASSERT_TRUE(ck.ok()) << ck.status();
  const auto want = ExpectedTensors(c);
  std::set<std::string> want_names;
  for (const Expected& e : want) {
    want_names.insert(e.name);
    auto t = (*ck)->Get(e.name, e.dtype, e.shape);
    EXPECT_TRUE(t.ok()) << t.status();
  }
  const auto names = (*ck)->Names();
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()), want_names);
  EXPECT_TRUE(std::filesystem::exists(dir.Join("model.safetensors")));
  EXPECT_FALSE(std::filesystem::exists(dir.Join("model.safetensors.index.json")));

  // Values: sinks in [-1, 1], norms near 1, expert weights decode to about 1/sqrt(H) std with
  // no NaN scale anywhere.
  for (float s : Bf16Values(*(*ck)->Get("model.layers.1.self_attn.sinks"))) {
    EXPECT_GE(s, -1.0f);
    EXPECT_LE(s, 1.0f);
  }
  for (float w : Bf16Values(*(*ck)->Get("model.norm.weight"))) EXPECT_NEAR(w, 1.0f, 0.25f);
  auto blocks = (*ck)->Get("model.layers.2.mlp.experts.gate_up_proj_blocks");
  auto scales = (*ck)->Get("model.layers.2.mlp.experts.gate_up_proj_scales");
  ASSERT_TRUE(blocks.ok() && scales.ok());
  for (size_t i = 0; i < scales->nbytes; ++i) ASSERT_NE(scales->data[i], mxfp4::kNanScale);
  const int64_t n = blocks->nbytes * 2;
  std::vector<float> w(n);
  mxfp4::DecodeRow(blocks->data, scales->data, n, w.data());
  double sum2 = 0;
  for (float x : w) sum2 += static_cast<double>(x) * x;
  const double std = std::sqrt(sum2 / n);
  EXPECT_NEAR(std, 1.0 / 8.0, 0.03);
}

TEST(MakeModel, SameSeedSameBytesOtherSeedOtherBytes) {
  TempDir a, b, d;
  ASSERT_TRUE(Make(a.path(), 42, 1).ok());
  ASSERT_TRUE(Make(b.path(), 42, 1).ok());
  ASSERT_TRUE(Make(d.path(), 43, 1).ok());
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}) {
    EXPECT_EQ(a.ReadFile(f), b.ReadFile(f)) << f;
  }
  EXPECT_NE(a.ReadFile("model.safetensors"), d.ReadFile("model.safetensors"));
  EXPECT_EQ(a.ReadFile("model.safetensors").size(), d.ReadFile("model.safetensors").size());
}

TEST(MakeModel, ShardedMatchesSingleFile) {
  TempDir one, two, per_layer;
  ASSERT_TRUE(Make(one.path(), 5, 1).ok());
  ASSERT_TRUE(Make(two.path(), 5, 2).ok());
  ASSERT_TRUE(Make(per_layer.path(), 5, 0).ok());
  EXPECT_TRUE(std::filesystem::exists(two.Join("model.safetensors.index.json")));
  EXPECT_TRUE(std::filesystem::exists(two.Join("model-00001-of-00002.safetensors")));
  EXPECT_TRUE(std::filesystem::exists(two.Join("model-00002-of-00002.safetensors")));
  EXPECT_FALSE(std::filesystem::exists(two.Join("model.safetensors")));
  EXPECT_TRUE(std::filesystem::exists(per_layer.Join("model-00006-of-00006.safetensors")));
  auto idx = nlohmann::json::parse(two.ReadFile("model.safetensors.index.json"));
  EXPECT_TRUE(idx["metadata"].contains("total_size"));

  auto c1 = Checkpoint::Open(one.path());
  ASSERT_TRUE(c1.ok()) << c1.status();
  for (const TempDir* d : {&two, &per_layer}) {
    auto c2 = Checkpoint::Open(d->path());
    ASSERT_TRUE(c2.ok()) << c2.status();
    ASSERT_EQ((*c1)->Names(), (*c2)->Names());
    std::set<std::string> files;
    for (const std::string& name : (*c1)->Names()) {
      auto t1 = (*c1)->Get(name);
      auto t2 = (*c2)->Get(name);
      ASSERT_EQ(t1->nbytes, t2->nbytes) << name;
      EXPECT_EQ(std::memcmp(t1->data, t2->data, t1->nbytes), 0) << name;
      files.insert(t2->file);
    }
    EXPECT_EQ(files.size(), d == &two ? 2u : 6u);
  }
  // Rewriting a folder as a single file removes the old shards and index.
  ASSERT_TRUE(Make(two.path(), 5, 1).ok());
  EXPECT_FALSE(std::filesystem::exists(two.Join("model.safetensors.index.json")));
  EXPECT_TRUE(Checkpoint::Open(two.path()).ok());
}

TEST(MakeModel, FewerLayers) {
  TempDir dir;
  ASSERT_TRUE(Make(dir.path(), 1, 1, 2).ok());
  auto cfg = ModelConfig::Load(dir.path());
  ASSERT_TRUE(cfg.ok()) << cfg.status();
  EXPECT_EQ(cfg->num_hidden_layers, 2);
  auto ck = Checkpoint::Open(dir.path());
  ASSERT_TRUE(ck.ok());
  EXPECT_EQ((*ck)->Names().size(), ExpectedTensors(*cfg).size());
}

TEST(MakeModel, RealShapesConfig) {
  MakeModelOptions o;
  o.preset = "gpt-oss-120b";
  auto c = make_model::ResolveConfig(o);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->num_hidden_layers, 36);
  EXPECT_EQ(c->num_local_experts, 128);
  EXPECT_EQ(c->vocab_size, 201088);
  EXPECT_EQ(c->hidden_size, 2880);
  auto parsed = ModelConfig::FromJsonText(make_model::ConfigJsonText(*c));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->rope_scaling.original_max_position_embeddings, 4096);
  o.preset = "gpt-oss-20b";
  o.num_layers = 2;
  c = make_model::ResolveConfig(o);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->num_local_experts, 32);
  EXPECT_EQ(c->layer_types.size(), 2u);
  o.preset = "nope";
  EXPECT_FALSE(make_model::ResolveConfig(o).ok());
}

#ifdef MXSERVE_MAKE_MODEL_BIN
TEST(MakeModel, Binary) {
  TempDir dir;
  const std::string bin = MXSERVE_MAKE_MODEL_BIN;
  const std::string cmd = bin + " --preset tiny --out " + dir.path() + " --seed 3 --shards 2 2>/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  EXPECT_TRUE(Checkpoint::Open(dir.path()).ok());
  EXPECT_TRUE(ModelConfig::Load(dir.path()).ok());
  EXPECT_NE(std::system((bin + " --preset tiny 2>/dev/null").c_str()), 0);
  EXPECT_NE(std::system((bin + " --preset huge --out " + dir.path() + " 2>/dev/null").c_str()), 0);
  EXPECT_NE(std::system((bin + " --preset tiny --out " + dir.path() + " --seed x 2>/dev/null").c_str()), 0);
}
#endif

}  // namespace
}  // namespace mxserve
