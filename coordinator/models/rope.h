// Rotary position embedding tables for the dense runner: YaRN (HF `_compute_yarn_parameters`,
// OAI ref `_compute_concentration_and_inv_freq`; docs/MODELS.md, YaRN) or plain RoPE, applied
// half-split (non-interleaved) with the concentration m multiplied into cos and sin.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "core/model_config.h"

namespace mxserve {

// The per-model constants; cos/sin per position are computed on the fly from inv_freq.
struct RopeParams {
  int rotary_dim = 0;            // = head_dim (gpt-oss rotates the whole head)
  // The YaRN correction range actually used (after truncation/clamping); 0/0 without YaRN.
  double low = 0.0;
  double high = 0.0;
  float concentration = 1.0f;    // m; multiplies cos and sin
  std::vector<float> inv_freq;   // [rotary_dim / 2], in fp32 as HF computes it
};

// YaRN's get_mscale: 0.1 * mscale * ln(factor) + 1, or 1 when factor <= 1.
double YarnMscale(double factor, double mscale);

// From the config's head_dim, rope_theta and rope_scaling ("yarn" or "default").
absl::StatusOr<RopeParams> ComputeRopeParams(const ModelConfig& config);

// Computes cos/sin for `position` into [rotary_dim/2] each, both already multiplied by m.
// Matches HF's fp32 arithmetic: freq = float(position) * inv_freq (one fp32 product).
void RopeCosSin(const RopeParams& rope, int64_t position, float* cos_out, float* sin_out);

// Rotates one head vector x[rotary_dim] in place (half-split: x1 = x[:d/2], x2 = x[d/2:];
// [x1*cos - x2*sin, x2*cos + x1*sin]).
void ApplyRope(const float* cos, const float* sin, int rotary_dim, float* x);

// The same rotation on the interleaved layout DeepSeek-V3 checkpoints use: pairs (x[2i], x[2i+1]).
// (HF's rope_interleave permutes to half-split and back; the dot products are identical.)
void ApplyRopeInterleaved(const float* cos, const float* sin, int rotary_dim, float* x);

}  // namespace mxserve
