// Writes a seeded random-weight checkpoint in exactly the HF layout (docs/MODELS.md): config.json,
// model.safetensors (or shards + model.safetensors.index.json) with BF16 dense tensors and
// MXFP4 expert blocks/scales (gpt-oss) or bf16 per-expert tensors exact in MXFP4 (DeepSeek-V3 /
// Kimi K2), tokenizer.json and tokenizer_config.json.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "core/model_config.h"

namespace mxserve::make_model {

struct MakeModelOptions {
  std::string preset = "tiny";  // tiny | gpt-oss-20b | gpt-oss-120b | deepseek-tiny | kimi-k2-tiny
  std::string out_dir;
  uint64_t seed = 0;
  // 1: one model.safetensors. N > 1: about N byte-balanced shards + index. 0: one shard per
  // layer plus one for embeddings/final norm/lm_head. -1: the preset's default (tiny: 1, the
  // real shapes: 0, so memory stays at one layer's bytes).
  int shards = -1;
  int num_layers = 0;  // > 0: write only this many layers (layer_types re-alternated)
  int threads = 0;     // fill threads; 0 = hardware concurrency
  bool progress = false;  // log each shard to stderr
};

// The model's ModelConfig as written to config.json (tokenizer ids filled in).
absl::StatusOr<ModelConfig> ResolveConfig(const MakeModelOptions& opts);

// HF config.json text for a gpt-oss or DeepSeek-V3 / Kimi K2 ModelConfig.
std::string ConfigJsonText(const ModelConfig& c);

// Writes the model folder. Removes stale model*.safetensors / index files in out_dir first.
absl::Status MakeModel(const MakeModelOptions& opts);

}  // namespace mxserve::make_model
