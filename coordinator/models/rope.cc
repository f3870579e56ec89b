#include "coordinator/models/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "absl/strings/str_cat.h"

namespace mxserve {
namespace {

// Each helper rounds to fp32 after every operation so the table equals HF's fp32 torch ops
// (torch computes `base ** (arange/dim)` etc. on float32 tensors); a double table would drift
// from HF by up to an ulp per frequency, which at position 1e5 is a visible phase difference.
float F(double v) { return static_cast<float>(v); }

double CorrectionDim(double num_rotations, int dim, double base, double max_pos) {
  return (dim * std::log(max_pos / (num_rotations * 2.0 * std::numbers::pi))) /
         (2.0 * std::log(base));
}

}  // namespace

double YarnMscale(double factor, double mscale) {
  return factor <= 1.0 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0;
}

absl::StatusOr<RopeParams> ComputeRopeParams(const ModelConfig& config) {
  const int dim = config.head_dim;
  if (dim <= 0 || dim % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("head_dim must be positive and even for RoPE, got ", dim));
  }
  if (!(config.rope_theta > 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rope_theta must be > 1, got ", config.rope_theta));
  }
  RopeParams p;
  p.rotary_dim = dim;
  const int half = dim / 2;
  const double base = config.rope_theta;
  // pos_freqs = base ** (arange(0, dim, 2).float() / dim), in fp32.
  std::vector<float> pos_freqs(half);
  for (int i = 0; i < half; ++i) {
    const float expo = F(static_cast<double>(F(2.0 * i)) / static_cast<double>(F(dim)));
    pos_freqs[i] = F(std::pow(static_cast<double>(F(base)), static_cast<double>(expo)));
  }
  p.inv_freq.resize(half);
  const RopeScaling& rs = config.rope_scaling;
  if (rs.rope_type == "default" || rs.rope_type.empty()) {
    for (int i = 0; i < half; ++i) p.inv_freq[i] = F(1.0 / pos_freqs[i]);
    p.concentration = 1.0f;
    return p;
  }
  if (rs.rope_type != "yarn") {
    return absl::InvalidArgumentError(
        absl::StrCat("rope_scaling.rope_type '", rs.rope_type, "' is not supported (yarn, default)"));
  }
  // The explicit factor (rope_scaling.factor), as HF transformers 5.17 uses it (it only warns when
  // max_position_embeddings / original_max_position_embeddings disagrees; checked on the GPU
  // machine). Some HF 4.x versions took that ratio instead; for gpt-oss both are 32.
  const double factor = rs.factor;
  const double orig = static_cast<double>(rs.original_max_position_embeddings);
  if (!(factor > 0.0) || !(orig > 0.0) || !(rs.beta_fast > 0.0) || !(rs.beta_slow > 0.0)) {
    return absl::InvalidArgumentError(
        "rope_scaling: factor, original_max_position_embeddings, beta_fast and beta_slow must be > 0");
  }
  // HF: attention_factor when given; else get_mscale(f, mscale) / get_mscale(f, mscale_all_dim)
  // when both are set (DeepSeek-V3: 1 when they are equal); else get_mscale(f) (gpt-oss).
  if (rs.attention_factor > 0.0) {
    p.concentration = F(rs.attention_factor);
  } else if (rs.mscale > 0.0 && rs.mscale_all_dim > 0.0) {
    p.concentration = F(YarnMscale(factor, rs.mscale) / YarnMscale(factor, rs.mscale_all_dim));
  } else {
    p.concentration = F(YarnMscale(factor, 1.0));
  }
  double low = CorrectionDim(rs.beta_fast, dim, base, orig);
  double high = CorrectionDim(rs.beta_slow, dim, base, orig);
  if (rs.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // HF: prevent a singular ramp
  p.low = low;
  p.high = high;
  const float span = F(high - low);
  for (int i = 0; i < half; ++i) {
    const float extrap = F(1.0 / pos_freqs[i]);
    const float interp = F(1.0 / static_cast<double>(F(factor * pos_freqs[i])));
    float ramp = F(static_cast<double>(F(static_cast<double>(i) - static_cast<double>(F(low)))) /
                   static_cast<double>(span));
    ramp = std::clamp(ramp, 0.0f, 1.0f);
    const float extrap_factor = F(1.0 - static_cast<double>(ramp));
    const float a = F(static_cast<double>(interp) * F(1.0 - static_cast<double>(extrap_factor)));
    const float b = F(static_cast<double>(extrap) * static_cast<double>(extrap_factor));
    p.inv_freq[i] = F(static_cast<double>(a) + static_cast<double>(b));
  }
  return p;
}

void RopeCosSin(const RopeParams& rope, int64_t position, float* cos_out, float* sin_out) {
  const float t = static_cast<float>(position);
  const int half = rope.rotary_dim / 2;
  for (int i = 0; i < half; ++i) {
    const float freq = t * rope.inv_freq[i];
    cos_out[i] = static_cast<float>(std::cos(static_cast<double>(freq))) * rope.concentration;
    sin_out[i] = static_cast<float>(std::sin(static_cast<double>(freq))) * rope.concentration;
  }
}

void ApplyRopeInterleaved(const float* cos, const float* sin, int rotary_dim, float* x) {
  for (int i = 0; i < rotary_dim / 2; ++i) {
    const float a = x[2 * i];
    const float b = x[2 * i + 1];
    x[2 * i] = a * cos[i] - b * sin[i];
    x[2 * i + 1] = b * cos[i] + a * sin[i];
  }
}

void ApplyRope(const float* cos, const float* sin, int rotary_dim, float* x) {
  const int half = rotary_dim / 2;
  float* x1 = x;
  float* x2 = x + half;
  for (int i = 0; i < half; ++i) {
    const float a = x1[i];
    const float b = x2[i];
    x1[i] = a * cos[i] - b * sin[i];
    x2[i] = b * cos[i] + a * sin[i];
  }
}

}  // namespace mxserve
