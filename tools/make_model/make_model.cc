#include "tools/make_model/make_model.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/bf16.h"
#include "core/mxfp4.h"
#include "core/safetensors.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "nlohmann/json.hpp"
#include "tools/make_model/model_presets.h"
#include "tools/make_model/random_weights.h"
#include "tools/tiny_tokenizer/tiny_tokenizer.h"

namespace mxserve::make_model {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// One generated unit: a BF16 tensor, or an MXFP4 weight that yields *_blocks and *_scales.
struct Group {
  // kMxfp4Bf16: a BF16 [rows, cols] tensor whose rows are MXFP4-exact (normal values through
  // the MXFP4 codec and back), so quantizing it at load loses nothing.
  enum Kind { kNormal, kUniform, kOnePlusNoise, kMxfp4, kMxfp4Bf16 } kind;
  std::string name;             // tensor name; for kMxfp4 the prefix ("...gate_up_proj")
  std::vector<int64_t> shape;   // BF16 shape; for kMxfp4 [E, rows, K]
  float a = 0, b = 0;           // std (normal, noise) or [lo, hi) (uniform)
  int layer = -1;               // -1: embeddings / final norm / lm_head

  int64_t Rows() const {
    int64_t r = 1;
    for (size_t i = 0; i + 1 < shape.size(); ++i) r *= shape[i];
    return shape.size() <= 1 ? 1 : r;
  }
  int64_t Cols() const { return shape.empty() ? 1 : shape.back(); }
  uint64_t Bytes() const {
    const uint64_t n = static_cast<uint64_t>(Rows()) * static_cast<uint64_t>(Cols());
    return kind == kMxfp4 ? n / 2 + n / 32 : n * 2;
  }
};

// DeepSeek-V3 / Kimi K2 (docs/MODELS.md): MLA, dense first layers, per-expert bf16 experts.
std::vector<Group> PlanDeepseek(const ModelConfig& c) {
  const int64_t H = c.hidden_size, V = c.vocab_size, E = c.num_local_experts;
  const int64_t nh = c.num_attention_heads, qhd = c.qk_nope_head_dim + c.qk_rope_head_dim;
  const int64_t Rq = c.q_lora_rank, Rkv = c.kv_lora_rank, R = c.qk_rope_head_dim;
  const int64_t Vd = c.v_head_dim, Im = c.intermediate_size;
  auto inv_sqrt = [](int64_t n) { return 1.0f / std::sqrt(static_cast<float>(n)); };
  const float noise = 0.05f;
  std::vector<Group> g;
  g.push_back({Group::kNormal, "model.embed_tokens.weight", {V, H}, 1.0f});
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    g.push_back({Group::kOnePlusNoise, p + "input_layernorm.weight", {H}, noise, 0, l});
    if (Rq > 0) {
      g.push_back({Group::kNormal, p + "self_attn.q_a_proj.weight", {Rq, H}, inv_sqrt(H), 0, l});
      g.push_back({Group::kOnePlusNoise, p + "self_attn.q_a_layernorm.weight", {Rq}, noise, 0, l});
      g.push_back({Group::kNormal, p + "self_attn.q_b_proj.weight", {nh * qhd, Rq}, inv_sqrt(Rq), 0, l});
    } else {
      g.push_back({Group::kNormal, p + "self_attn.q_proj.weight", {nh * qhd, H}, inv_sqrt(H), 0, l});
    }
    g.push_back({Group::kNormal, p + "self_attn.kv_a_proj_with_mqa.weight", {Rkv + R, H}, inv_sqrt(H), 0, l});
    g.push_back({Group::kOnePlusNoise, p + "self_attn.kv_a_layernorm.weight", {Rkv}, noise, 0, l});
    g.push_back({Group::kNormal, p + "self_attn.kv_b_proj.weight", {nh * (c.qk_nope_head_dim + Vd), Rkv},
                 inv_sqrt(Rkv), 0, l});
    g.push_back({Group::kNormal, p + "self_attn.o_proj.weight", {H, nh * Vd}, inv_sqrt(nh * Vd), 0, l});
    g.push_back({Group::kOnePlusNoise, p + "post_attention_layernorm.weight", {H}, noise, 0, l});
    if (!c.IsMoeLayer(l)) {
      const int64_t I = c.dense_intermediate_size;
      g.push_back({Group::kNormal, p + "mlp.gate_proj.weight", {I, H}, inv_sqrt(H), 0, l});
      g.push_back({Group::kNormal, p + "mlp.up_proj.weight", {I, H}, inv_sqrt(H), 0, l});
      g.push_back({Group::kNormal, p + "mlp.down_proj.weight", {H, I}, inv_sqrt(I), 0, l});
      continue;
    }
    g.push_back({Group::kNormal, p + "mlp.gate.weight", {E, H}, inv_sqrt(H), 0, l});
    g.push_back({Group::kNormal, p + "mlp.gate.e_score_correction_bias", {E}, 0.1f, 0, l});
    for (int64_t e = 0; e < E; ++e) {
      const std::string x = absl::StrCat(p, "mlp.experts.", e, ".");
      g.push_back({Group::kMxfp4Bf16, x + "gate_proj.weight", {Im, H}, inv_sqrt(H), 0, l});
      g.push_back({Group::kMxfp4Bf16, x + "up_proj.weight", {Im, H}, inv_sqrt(H), 0, l});
      g.push_back({Group::kMxfp4Bf16, x + "down_proj.weight", {H, Im}, inv_sqrt(Im), 0, l});
    }
    if (c.n_shared_experts > 0) {
      const int64_t I = Im * c.n_shared_experts;
      g.push_back({Group::kNormal, p + "mlp.shared_experts.gate_proj.weight", {I, H}, inv_sqrt(H), 0, l});
      g.push_back({Group::kNormal, p + "mlp.shared_experts.up_proj.weight", {I, H}, inv_sqrt(H), 0, l});
      g.push_back({Group::kNormal, p + "mlp.shared_experts.down_proj.weight", {H, I}, inv_sqrt(I), 0, l});
    }
  }
  g.push_back({Group::kOnePlusNoise, "model.norm.weight", {H}, noise});
  g.push_back({Group::kNormal, "lm_head.weight", {V, H}, 4.0f * inv_sqrt(H)});
  return g;
}

std::vector<Group> Plan(const ModelConfig& c) {
  if (c.IsDeepseekV3()) return PlanDeepseek(c);
  const int64_t H = c.hidden_size, I = c.intermediate_size, E = c.num_local_experts;
  const int64_t V = c.vocab_size, Hq = int64_t{c.num_attention_heads} * c.head_dim;
  const int64_t Hkv = int64_t{c.num_key_value_heads} * c.head_dim;
  const float in_h = 1.0f / std::sqrt(static_cast<float>(H));
  const float bias = 0.02f, noise = 0.05f;
  std::vector<Group> g;
  g.push_back({Group::kNormal, "model.embed_tokens.weight", {V, H}, 1.0f});
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    g.push_back({Group::kOnePlusNoise, p + "input_layernorm.weight", {H}, noise, 0, l});
    for (const char* proj : {"q_proj", "k_proj", "v_proj"}) {
      const int64_t out = std::string(proj) == "q_proj" ? Hq : Hkv;
      g.push_back({Group::kNormal, absl::StrCat(p, "self_attn.", proj, ".weight"), {out, H}, in_h, 0, l});
      g.push_back({Group::kNormal, absl::StrCat(p, "self_attn.", proj, ".bias"), {out}, bias, 0, l});
    }
    g.push_back({Group::kNormal, p + "self_attn.o_proj.weight", {H, Hq},
                 1.0f / std::sqrt(static_cast<float>(Hq)), 0, l});
    g.push_back({Group::kNormal, p + "self_attn.o_proj.bias", {H}, bias, 0, l});
    g.push_back({Group::kUniform, p + "self_attn.sinks", {c.num_attention_heads}, -1.0f, 1.0f, l});
    g.push_back({Group::kOnePlusNoise, p + "post_attention_layernorm.weight", {H}, noise, 0, l});
    g.push_back({Group::kNormal, p + "mlp.router.weight", {E, H}, in_h, 0, l});
    g.push_back({Group::kNormal, p + "mlp.router.bias", {E}, bias, 0, l});
    g.push_back({Group::kMxfp4, p + "mlp.experts.gate_up_proj", {E, 2 * I, H}, in_h, 0, l});
    g.push_back({Group::kNormal, p + "mlp.experts.gate_up_proj_bias", {E, 2 * I}, bias, 0, l});
    g.push_back({Group::kMxfp4, p + "mlp.experts.down_proj", {E, H, I},
                 1.0f / std::sqrt(static_cast<float>(I)), 0, l});
    g.push_back({Group::kNormal, p + "mlp.experts.down_proj_bias", {E, H}, bias, 0, l});
  }
  g.push_back({Group::kOnePlusNoise, "model.norm.weight", {H}, noise});
  // Logits with std ~4 over a unit-RMS hidden state: peaked enough that greedy decoding
  // follows the input rather than one favourite token.
  g.push_back({Group::kNormal, "lm_head.weight", {V, H}, 4.0f * in_h});
  return g;
}

// Fills one group's tensors into the writer, rows spread over the pool.
void Generate(const Group& g, uint64_t seed, ThreadPool& pool, SafetensorsWriter& w) {
  const int64_t rows = g.Rows(), cols = g.Cols();
  constexpr int64_t kChunk = 64;
  const int64_t chunks = (rows + kChunk - 1) / kChunk;
  if (g.kind == Group::kMxfp4) {
    const int64_t E = g.shape[0], R = g.shape[1], K = g.shape[2];
    std::vector<uint8_t> blocks(static_cast<size_t>(E * R * K / 2));
    std::vector<uint8_t> scales(static_cast<size_t>(E * R * K / 32));
    pool.ParallelFor(chunks, [&](int64_t ch) {
      std::vector<float> row(static_cast<size_t>(K));
      for (int64_t r = ch * kChunk; r < std::min(rows, (ch + 1) * kChunk); ++r) {
        RowRng rng(seed, g.name, r);
        for (auto& v : row) v = g.a * rng.Normal();
        mxfp4::EncodeRow(row.data(), K, blocks.data() + r * (K / 2), scales.data() + r * (K / 32));
      }
    });
    w.Add(g.name + "_blocks", DType::kU8, {E, R, K / 32, 16}, std::move(blocks));
    w.Add(g.name + "_scales", DType::kU8, {E, R, K / 32}, std::move(scales));
    return;
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(rows * cols * 2));
  pool.ParallelFor(chunks, [&](int64_t ch) {
    std::vector<float> exact;
    std::vector<uint8_t> packed, scales;
    for (int64_t r = ch * kChunk; r < std::min(rows, (ch + 1) * kChunk); ++r) {
      RowRng rng(seed, g.name, r);
      uint8_t* out = bytes.data() + r * cols * 2;
      if (g.kind == Group::kMxfp4Bf16) {
        exact.resize(cols);
        packed.resize(cols / 2);
        scales.resize(cols / 32);
        for (auto& v : exact) v = g.a * rng.Normal();
        mxfp4::EncodeRow(exact.data(), cols, packed.data(), scales.data());
        mxfp4::DecodeRow(packed.data(), scales.data(), cols, exact.data());
        for (int64_t i = 0; i < cols; ++i) {
          const uint16_t h = FloatToBf16(exact[i]);  // exact: E2M1 times a power of two
          out[2 * i] = static_cast<uint8_t>(h);
          out[2 * i + 1] = static_cast<uint8_t>(h >> 8);
        }
        continue;
      }
      for (int64_t i = 0; i < cols; ++i) {
        float v;
        switch (g.kind) {
          case Group::kUniform: v = rng.Uniform(g.a, g.b); break;
          case Group::kOnePlusNoise: v = 1.0f + g.a * rng.Normal(); break;
          default: v = g.a * rng.Normal(); break;
        }
        const uint16_t h = FloatToBf16(v);
        out[2 * i] = static_cast<uint8_t>(h);
        out[2 * i + 1] = static_cast<uint8_t>(h >> 8);
      }
    }
  });
  w.Add(g.name, DType::kBF16, g.shape, std::move(bytes));
}

// Shard of each group: 0..n-1, in order.
std::vector<int> AssignShards(const std::vector<Group>& groups, int shards, int num_layers) {
  std::vector<int> s(groups.size(), 0);
  if (shards == 0) {
    for (size_t i = 0; i < groups.size(); ++i) {
      // Embeddings in the first shard, each layer in its own, final norm and lm_head last.
      s[i] = groups[i].layer >= 0 ? groups[i].layer + 1 : (i == 0 ? 0 : num_layers + 1);
    }
  } else if (shards > 1) {
    uint64_t total = 0;
    for (const Group& g : groups) total += g.Bytes();
    uint64_t before = 0;
    for (size_t i = 0; i < groups.size(); ++i) {
      const uint64_t mid = before + groups[i].Bytes() / 2;
      s[i] = static_cast<int>(std::min<uint64_t>(shards - 1, mid * shards / std::max<uint64_t>(total, 1)));
      before += groups[i].Bytes();
    }
  }
  // Renumber so that only non-empty shards exist, in order.
  std::map<int, int> dense;
  for (int x : s) dense.emplace(x, 0);
  int k = 0;
  for (auto& [from, to] : dense) to = k++;
  for (int& x : s) x = dense[x];
  return s;
}

absl::Status WriteText(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::PermissionDeniedError(absl::StrCat(path.string(), ": cannot create"));
  out << text;
  out.flush();
  if (!out) return absl::DataLossError(absl::StrCat(path.string(), ": write failed"));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> ResolveConfig(const MakeModelOptions& opts) {
  ASSIGN_OR_RETURN(Preset p, GetPreset(opts.preset));
  ModelConfig c = p.config;
  if (opts.num_layers < 0) return absl::InvalidArgumentError("--num-layers must be >= 0");
  if (opts.num_layers > 0) {
    c.num_hidden_layers = opts.num_layers;
    c.layer_types = c.IsDeepseekV3() ? std::vector<std::string>(opts.num_layers, "full_attention")
                                     : AlternatingLayerTypes(opts.num_layers);
    c.first_k_dense_replace = std::min(c.first_k_dense_replace, opts.num_layers);
  }
  ASSIGN_OR_RETURN(TokenizerFiles tok, MakeTinyTokenizer(p.num_merges));
  if (p.vocab_from_tokenizer) {
    c.vocab_size = tok.vocab_size;
  }
  // The ids the written tokenizer really has: a served synthetic model stops on its EOS.
  c.eos_token_ids = {tok.eos_token_id};
  c.pad_token_id = tok.pad_token_id;
  return c;
}

namespace {

// HF DeepseekV3Config fields (the hub's config.json of DeepSeek-V3 / Kimi K2).
std::string DeepseekConfigJsonText(const ModelConfig& c) {
  json j;
  j["architectures"] = {c.architecture};
  j["model_type"] = c.model_type;
  j["attention_bias"] = false;
  j["attention_dropout"] = 0.0;
  j["eos_token_id"] = c.eos_token_ids.size() == 1 ? json(c.eos_token_ids[0]) : json(c.eos_token_ids);
  j["pad_token_id"] = c.pad_token_id;
  j["first_k_dense_replace"] = c.first_k_dense_replace;
  j["hidden_act"] = "silu";
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.dense_intermediate_size;
  j["kv_lora_rank"] = c.kv_lora_rank;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["moe_intermediate_size"] = c.intermediate_size;
  j["moe_layer_freq"] = 1;
  j["n_group"] = c.n_group;
  j["n_routed_experts"] = c.num_local_experts;
  j["n_shared_experts"] = c.n_shared_experts;
  j["norm_topk_prob"] = c.norm_topk_prob;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_experts_per_tok"] = c.num_experts_per_tok;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_key_value_heads"] = c.num_attention_heads;
  j["num_nextn_predict_layers"] = 0;
  j["q_lora_rank"] = c.q_lora_rank > 0 ? json(c.q_lora_rank) : json(nullptr);
  j["qk_nope_head_dim"] = c.qk_nope_head_dim;
  j["qk_rope_head_dim"] = c.qk_rope_head_dim;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_interleave"] = true;
  if (c.rope_scaling.rope_type == "yarn") {
    j["rope_scaling"] = {{"type", "yarn"},
                         {"factor", c.rope_scaling.factor},
                         {"original_max_position_embeddings", c.rope_scaling.original_max_position_embeddings},
                         {"beta_fast", c.rope_scaling.beta_fast},
                         {"beta_slow", c.rope_scaling.beta_slow},
                         {"mscale", c.rope_scaling.mscale},
                         {"mscale_all_dim", c.rope_scaling.mscale_all_dim}};
  } else {
    j["rope_scaling"] = nullptr;
  }
  j["rope_theta"] = c.rope_theta;
  j["routed_scaling_factor"] = c.routed_scaling_factor;
  j["scoring_func"] = "sigmoid";
  j["tie_word_embeddings"] = false;
  j["topk_group"] = c.topk_group;
  j["topk_method"] = "noaux_tc";
  j["torch_dtype"] = "bfloat16";
  j["use_cache"] = true;
  j["v_head_dim"] = c.v_head_dim;
  j["vocab_size"] = c.vocab_size;
  return j.dump(2) + "\n";
}

}  // namespace

std::string ConfigJsonText(const ModelConfig& c) {
  if (c.IsDeepseekV3()) return DeepseekConfigJsonText(c);
  json j;
  j["architectures"] = {c.architecture};
  j["attention_bias"] = c.attention_bias;
  j["attention_dropout"] = 0.0;
  j["eos_token_id"] = c.eos_token_ids.size() == 1 ? json(c.eos_token_ids[0]) : json(c.eos_token_ids);
  j["experts_per_token"] = c.num_experts_per_tok;
  j["head_dim"] = c.head_dim;
  j["hidden_act"] = "silu";
  j["hidden_size"] = c.hidden_size;
  j["initial_context_length"] = c.rope_scaling.original_max_position_embeddings;
  j["initializer_range"] = 0.02;
  j["intermediate_size"] = c.intermediate_size;
  j["layer_types"] = c.layer_types;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["model_type"] = c.model_type;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_experts_per_tok"] = c.num_experts_per_tok;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["num_local_experts"] = c.num_local_experts;
  j["output_router_logits"] = false;
  j["pad_token_id"] = c.pad_token_id;
  j["quantization_config"] = {
      {"modules_to_not_convert",
       {"model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"}},
      {"quant_method", c.quant_method}};
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_scaling"] = {{"beta_fast", c.rope_scaling.beta_fast},
                       {"beta_slow", c.rope_scaling.beta_slow},
                       {"factor", c.rope_scaling.factor},
                       {"original_max_position_embeddings", c.rope_scaling.original_max_position_embeddings},
                       {"rope_type", c.rope_scaling.rope_type},
                       {"truncate", c.rope_scaling.truncate}};
  j["rope_theta"] = c.rope_theta;
  j["router_aux_loss_coef"] = 0.9;
  j["sliding_window"] = c.sliding_window;
  j["swiglu_limit"] = c.swiglu_limit;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["transformers_version"] = "4.55.0.dev0";
  j["use_cache"] = true;
  j["vocab_size"] = c.vocab_size;
  return j.dump(2) + "\n";
}

absl::Status MakeModel(const MakeModelOptions& opts) {
  if (opts.out_dir.empty()) return absl::InvalidArgumentError("--out is required");
  ASSIGN_OR_RETURN(Preset preset, GetPreset(opts.preset));
  ASSIGN_OR_RETURN(ModelConfig c, ResolveConfig(opts));
  // What we write must be what we read: check the config through the real parser.
  const std::string config_text = ConfigJsonText(c);
  RETURN_IF_ERROR(ModelConfig::FromJsonText(config_text).status());
  ASSIGN_OR_RETURN(TokenizerFiles tok, MakeTinyTokenizer(preset.num_merges));
  if (opts.shards < -1) return absl::InvalidArgumentError("--shards must be >= 0");
  const int shards = opts.shards == -1 ? preset.default_shards : opts.shards;

  const fs::path out(opts.out_dir);
  std::error_code ec;
  fs::create_directories(out, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat(opts.out_dir, ": cannot create: ", ec.message()));
  for (const auto& entry : fs::directory_iterator(out, ec)) {
    const std::string n = entry.path().filename().string();
    if ((n.starts_with("model") && n.ends_with(".safetensors")) || n == "model.safetensors.index.json") {
      fs::remove(entry.path(), ec);
    }
  }

  RETURN_IF_ERROR(WriteText(out / "config.json", config_text));
  RETURN_IF_ERROR(WriteText(out / "tokenizer.json", tok.tokenizer_json));
  RETURN_IF_ERROR(WriteText(out / "tokenizer_config.json", tok.tokenizer_config_json));
  RETURN_IF_ERROR(WriteText(out / "generation_config.json",
                            json({{"eos_token_id", c.eos_token_ids},
                                  {"pad_token_id", c.pad_token_id},
                                  {"transformers_version", "4.55.0.dev0"}}).dump(2) + "\n"));

  const std::vector<Group> groups = Plan(c);
  const std::vector<int> shard_of = AssignShards(groups, shards, c.num_hidden_layers);
  const int num_shards = shard_of.empty() ? 1 : shard_of.back() + 1;
  ThreadPool pool(opts.threads);
  json weight_map = json::object();
  uint64_t total_size = 0;
  size_t gi = 0;
  for (int s = 0; s < num_shards; ++s) {
    const std::string file = num_shards == 1 && shards <= 1
                                 ? "model.safetensors"
                                 : absl::StrFormat("model-%05d-of-%05d.safetensors", s + 1, num_shards);
    SafetensorsWriter w;
    w.SetMetadata("format", "pt");
    uint64_t bytes = 0;
    for (; gi < groups.size() && shard_of[gi] == s; ++gi) {
      Generate(groups[gi], opts.seed, pool, w);
      bytes += groups[gi].Bytes();
      if (groups[gi].kind == Group::kMxfp4) {
        weight_map[groups[gi].name + "_blocks"] = file;
        weight_map[groups[gi].name + "_scales"] = file;
      } else {
        weight_map[groups[gi].name] = file;
      }
    }
    RETURN_IF_ERROR(w.Write((out / file).string()));
    total_size += bytes;
    if (opts.progress) {
      std::cerr << absl::StrFormat("mxserve-make-model: wrote %s (%.1f MB, shard %d/%d)\n", file,
                                   bytes / 1e6, s + 1, num_shards);
    }
  }
  if (num_shards > 1 || shards > 1) {
    json index = {{"metadata", {{"total_size", total_size}}}, {"weight_map", weight_map}};
    RETURN_IF_ERROR(WriteText(out / "model.safetensors.index.json", index.dump(2) + "\n"));
  }
  return absl::OkStatus();
}

}  // namespace mxserve::make_model
