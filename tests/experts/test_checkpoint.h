// Test support: a seeded random checkpoint holding only the MoE expert tensors of a small
// gpt-oss-shaped model (exact HF names, dtypes and layouts) plus its config.json, with knobs
// to break it (drop a tensor, change a shape, plant a 0xFF scale).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace mxserve::testing {

struct ExpertCheckpointSpec {
  int layers = 3;
  int hidden = 64;
  int intermediate = 32;
  int experts = 8;
  int top_k = 2;
  uint32_t seed = 1;
  // Breakage.
  std::string drop_tensor;                 // omit this tensor
  std::string reshape_tensor;              // write this one with a wrong leading dim
  std::string nan_scale_tensor;            // put a 0xFF scale byte into this tensor ...
  int nan_scale_expert = 0;                // ... in this expert's slice
};

std::string ExpertConfigJson(const ExpertCheckpointSpec& spec);
// Writes dir/config.json and dir/model.safetensors.
absl::Status WriteExpertCheckpoint(const std::string& dir, const ExpertCheckpointSpec& spec);
// A fresh empty directory under TEST_TMPDIR or /tmp (removed by the caller if it wants).
std::string NewTempDir();
// Seeded random floats ~ N(0, stddev).
std::vector<float> RandomFloats(size_t n, uint32_t seed, float stddev = 1.0f);

}  // namespace mxserve::testing
