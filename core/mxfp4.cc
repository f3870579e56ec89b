// MXFP4 codec: see mxfp4.h and docs/MODELS.md.
#include "core/mxfp4.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

namespace mxserve::mxfp4 {

float ScaleToFloat(uint8_t s) {
  if (s == kNanScale) return std::numeric_limits<float>::quiet_NaN();
  // 2^(s-127) built from bits: s >= 1 is a normal float with biased exponent s; s == 0 is the
  // subnormal 2^-127 = 0x00400000 (mantissa's top bit). Exact, no libm.
  uint32_t bits = s == 0 ? 0x00400000u : static_cast<uint32_t>(s) << 23;
  return std::bit_cast<float>(bits);
}

void DecodeBlock(const uint8_t* packed16, uint8_t scale, float* out32) {
  const float sc = ScaleToFloat(scale);
  for (int j = 0; j < kBlockBytes; ++j) {
    const uint8_t b = packed16[j];
    out32[2 * j] = kE2M1[b & 0x0F] * sc;     // low nibble: even element
    out32[2 * j + 1] = kE2M1[b >> 4] * sc;   // high nibble: odd element
  }
}

void DecodeRow(const uint8_t* packed, const uint8_t* scales, int64_t n, float* out) {
  const int64_t blocks = n / kBlockSize;
  for (int64_t g = 0; g < blocks; ++g) {
    DecodeBlock(packed + g * kBlockBytes, scales[g], out + g * kBlockSize);
  }
}

uint8_t EncodeE2M1(float v) {
  if (std::isnan(v)) return 0;
  const uint8_t sign = std::signbit(v) ? 8 : 0;
  const float a = std::fabs(v);
  // Magnitudes 0, .5, 1, 1.5, 2, 3, 4, 6 are codes 0..7. Midpoints decide; at an exact
  // midpoint the even code wins (round half to even on the code, as OCP's reference does).
  uint8_t code;
  if (a <= 0.25f) code = 0;        // tie 0.25 -> code 0
  else if (a < 0.75f) code = 1;
  else if (a <= 1.25f) code = 2;   // tie 0.75 -> 2, tie 1.25 -> 2
  else if (a < 1.75f) code = 3;
  else if (a <= 2.5f) code = 4;    // tie 1.75 -> 4, tie 2.5 -> 4
  else if (a < 3.5f) code = 5;
  else if (a <= 5.0f) code = 6;    // tie 3.5 -> 6, tie 5 -> 6
  else code = 7;                   // saturate at 6 (inf too)
  return sign | code;
}

void EncodeRow(const float* in, int64_t n, uint8_t* packed, uint8_t* scales) {
  const int64_t blocks = n / kBlockSize;
  for (int64_t g = 0; g < blocks; ++g) {
    const float* x = in + g * kBlockSize;
    float amax = 0.0f;
    for (int i = 0; i < kBlockSize; ++i) {
      const float a = std::fabs(x[i]);
      if (a > amax) amax = a;  // NaN never compares greater: ignored
    }
    int sbyte = 127;  // all-zero block: scale 1.0, every element code 0
    if (amax > 0.0f) {
      int e;
      if (std::isinf(amax)) {
        e = 128;
      } else {
        std::frexp(amax, &e);  // amax = m * 2^e, m in [0.5, 1): floor(log2(amax)) = e - 1
      }
      sbyte = (e - 1) - 2 + 127;
      if (sbyte < 0) sbyte = 0;
      if (sbyte > 254) sbyte = 254;
    }
    scales[g] = static_cast<uint8_t>(sbyte);
    // 1/2^k is exact and finite for every scale byte (1/2^-127 = 2^127 < FLT_MAX).
    const float inv = 1.0f / ScaleToFloat(static_cast<uint8_t>(sbyte));
    uint8_t* p = packed + g * kBlockBytes;
    for (int j = 0; j < kBlockBytes; ++j) {
      const float lo = x[2 * j] * inv, hi = x[2 * j + 1] * inv;
      p[j] = static_cast<uint8_t>(EncodeE2M1(lo) | (EncodeE2M1(hi) << 4));
    }
  }
}

int64_t FindNanScale(const uint8_t* scales, int64_t n) {
  const void* p = std::memchr(scales, kNanScale, static_cast<size_t>(n));
  return p == nullptr ? -1 : static_cast<const uint8_t*>(p) - scales;
}

}  // namespace mxserve::mxfp4
