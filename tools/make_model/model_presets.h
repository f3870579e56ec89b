// Named model shapes for mxserve-make-model: "tiny" (CPU tests), the real gpt-oss-20b and
// gpt-oss-120b shapes (docs/MODELS.md, gpt-oss config), and "deepseek-tiny" / "kimi-k2-tiny"
// (DeepSeek-V3 / Kimi K2 layout, bf16 experts exact in MXFP4), as ModelConfig values.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "core/model_config.h"

namespace mxserve::make_model {

struct Preset {
  ModelConfig config;  // vocab_size/eos/pad are replaced by the tokenizer's for the tiny preset
  int num_merges = 0;  // tiny tokenizer merges
  bool vocab_from_tokenizer = false;
  int default_shards = 1;  // 0: one shard per layer (plus one for embeddings/head)
};

absl::StatusOr<Preset> GetPreset(const std::string& name);

// The layer_types alternation GptOssConfig uses: even layers sliding, odd layers full.
std::vector<std::string> AlternatingLayerTypes(int num_layers);

}  // namespace mxserve::make_model
