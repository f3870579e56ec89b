#include "tests/experts/test_checkpoint.h"

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/bf16.h"
#include "core/mxfp4.h"
#include "core/safetensors.h"

namespace mxserve::testing {

std::string ExpertConfigJson(const ExpertCheckpointSpec& s) {
  std::vector<std::string> types;
  for (int l = 0; l < s.layers; ++l) {
    types.push_back(l % 2 == 0 ? "\"sliding_attention\"" : "\"full_attention\"");
  }
  return absl::StrCat(R"({
  "architectures": ["GptOssForCausalLM"],
  "attention_bias": true,
  "attention_dropout": 0.0,
  "eos_token_id": 2,
  "experts_per_token": )", s.top_k, R"(,
  "head_dim": 16,
  "hidden_act": "silu",
  "hidden_size": )", s.hidden, R"(,
  "initial_context_length": 4096,
  "intermediate_size": )", s.intermediate, R"(,
  "layer_types": [)", absl::StrJoin(types, ", "), R"(],
  "max_position_embeddings": 131072,
  "model_type": "gpt_oss",
  "num_attention_heads": 4,
  "num_experts_per_tok": )", s.top_k, R"(,
  "num_hidden_layers": )", s.layers, R"(,
  "num_key_value_heads": 2,
  "num_local_experts": )", s.experts, R"(,
  "pad_token_id": 0,
  "quantization_config": {"modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"], "quant_method": "mxfp4"},
  "rms_norm_eps": 1e-05,
  "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0, "original_max_position_embeddings": 4096, "rope_type": "yarn", "truncate": false},
  "rope_theta": 150000,
  "sliding_window": 128,
  "swiglu_limit": 7.0,
  "tie_word_embeddings": false,
  "vocab_size": 256
}
)");
}

std::vector<float> RandomFloats(size_t n, uint32_t seed, float stddev) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

namespace {

struct Mx {
  std::vector<uint8_t> blocks, scales;
};

// [E, rows, cols] random matrix -> MXFP4 blocks [E, rows, cols/32, 16] and scales.
Mx RandomMxfp4(int E, int rows, int cols, uint32_t seed) {
  Mx m;
  m.blocks.resize(static_cast<size_t>(E) * rows * cols / 2);
  m.scales.resize(static_cast<size_t>(E) * rows * cols / 32);
  std::vector<float> row;
  for (int e = 0; e < E; ++e) {
    for (int r = 0; r < rows; ++r) {
      row = RandomFloats(cols, seed + 7919u * (e * rows + r), 0.15f);
      const size_t i = static_cast<size_t>(e) * rows + r;
      mxfp4::EncodeRow(row.data(), cols, m.blocks.data() + i * cols / 2,
                       m.scales.data() + i * cols / 32);
    }
  }
  return m;
}

std::vector<uint8_t> RandomBf16(size_t n, uint32_t seed) {
  std::vector<float> f = RandomFloats(n, seed, 0.1f);
  std::vector<uint8_t> b(n * 2);
  for (size_t i = 0; i < n; ++i) {
    uint16_t h = FloatToBf16(f[i]);
    std::memcpy(&b[2 * i], &h, 2);
  }
  return b;
}

}  // namespace

absl::Status WriteExpertCheckpoint(const std::string& dir, const ExpertCheckpointSpec& s) {
  {
    std::ofstream f(dir + "/config.json");
    f << ExpertConfigJson(s);
    if (!f) return absl::InternalError("cannot write config.json in " + dir);
  }
  SafetensorsWriter w;
  const int64_t E = s.experts, H = s.hidden, I = s.intermediate;
  auto add = [&](const std::string& name, DType dt, std::vector<int64_t> shape,
                 std::vector<uint8_t> bytes) {
    if (name == s.drop_tensor) return;
    if (name == s.reshape_tensor) {
      shape[0] += 1;  // one expert too many: a shape mismatch with consistent bytes
      bytes.resize(bytes.size() / E * (E + 1));
    }
    if (name == s.nan_scale_tensor) {
      const size_t per = bytes.size() / E;
      bytes[s.nan_scale_expert * per + per / 2] = 0xFF;
    }
    w.Add(name, dt, std::move(shape), std::move(bytes));
  };
  for (int l = 0; l < s.layers; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".mlp.experts.");
    const uint32_t seed = s.seed * 1000003u + l * 101u;
    Mx gu = RandomMxfp4(E, 2 * I, H, seed + 1);
    Mx dn = RandomMxfp4(E, H, I, seed + 2);
    add(p + "gate_up_proj_blocks", DType::kU8, {E, 2 * I, H / 32, 16}, std::move(gu.blocks));
    add(p + "gate_up_proj_scales", DType::kU8, {E, 2 * I, H / 32}, std::move(gu.scales));
    add(p + "gate_up_proj_bias", DType::kBF16, {E, 2 * I}, RandomBf16(E * 2 * I, seed + 3));
    add(p + "down_proj_blocks", DType::kU8, {E, H, I / 32, 16}, std::move(dn.blocks));
    add(p + "down_proj_scales", DType::kU8, {E, H, I / 32}, std::move(dn.scales));
    add(p + "down_proj_bias", DType::kBF16, {E, H}, RandomBf16(E * H, seed + 4));
  }
  return w.Write(dir + "/model.safetensors");
}

std::string NewTempDir() {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string t = absl::StrCat(base != nullptr && *base ? base : "/tmp", "/mxserve-worker-test-XXXXXX");
  if (mkdtemp(t.data()) == nullptr) std::abort();
  return t;
}

}  // namespace mxserve::testing
