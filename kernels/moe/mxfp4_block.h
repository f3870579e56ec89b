// Scalar MXFP4 helpers private to the kernels: the E8M0 scale as a float (same rule as
// core/mxfp4.h: 2^(s-127), 0xFF = NaN) and a row decoder for the reference kernel. Kept
// header-only so the kernels do not depend on when the core codec gets linked.
#pragma once

#include <bit>
#include <cstdint>

#include "core/mxfp4.h"

namespace mxserve::kernels::internal {

// 2^(s-127) for s in 0x00..0xFE (0x00 is the subnormal 2^-127), NaN for 0xFF.
inline float E8M0ToFloat(uint8_t s) {
  if (s == 0xFF) return std::bit_cast<float>(uint32_t{0x7FC00000});
  if (s == 0) return std::bit_cast<float>(uint32_t{0x00400000});
  return std::bit_cast<float>(uint32_t{s} << 23);
}

// Decodes `cols` elements (cols % 32 == 0) of one MXFP4 row into floats.
inline void DecodeMxfp4Row(const uint8_t* blocks, const uint8_t* scales, int cols, float* out) {
  for (int b = 0; b < cols / mxfp4::kBlockSize; ++b) {
    const float s = E8M0ToFloat(scales[b]);
    const uint8_t* p = blocks + b * mxfp4::kBlockBytes;
    for (int j = 0; j < mxfp4::kBlockBytes; ++j) {
      out[b * 32 + 2 * j] = mxfp4::kE2M1[p[j] & 0x0F] * s;
      out[b * 32 + 2 * j + 1] = mxfp4::kE2M1[p[j] >> 4] * s;
    }
  }
}

// gpt-oss's clamped SwiGLU on one (gate, up) pair. Written with comparisons that keep NaN
// (std::min/max and vminps would silently turn a NaN gate into the limit).
inline float SwiGlu(float g, float u, float alpha, float limit) {
  if (g > limit) g = limit;
  if (u > limit) u = limit;
  if (u < -limit) u = -limit;
  const float sig = 1.0f / (1.0f + __builtin_expf(-alpha * g));
  return (u + 1.0f) * g * sig;
}

// Plain SwiGLU (DeepSeek-V3 / Kimi K2 experts): silu(g) * u.
inline float SiluMul(float g, float u) { return g / (1.0f + __builtin_expf(-g)) * u; }

}  // namespace mxserve::kernels::internal
