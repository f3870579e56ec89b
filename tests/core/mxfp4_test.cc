#include "core/mxfp4.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace mxserve::mxfp4 {
namespace {

// The slow, obvious twin: value = LUT[code] * 2^(scale-127) computed in double with ldexp,
// NaN for 0xFF.
double RefValue(uint8_t code, uint8_t scale) {
  static const double kLut[16] = {0, .5, 1, 1.5, 2, 3, 4, 6, -0.0, -.5, -1, -1.5, -2, -3, -4, -6};
  if (scale == 0xFF) return std::nan("");
  return std::ldexp(kLut[code], scale - 127);
}

TEST(Mxfp4, AllSixteenCodes) {
  const float want[16] = {0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0f, -0.5, -1, -1.5, -2, -3, -4, -6};
  for (int code = 0; code < 16; ++code) {
    uint8_t packed[16];
    std::memset(packed, static_cast<uint8_t>(code | (code << 4)), 16);
    float out[32];
    DecodeBlock(packed, 127, out);
    for (int i = 0; i < 32; ++i) {
      EXPECT_EQ(out[i], want[code]) << "code " << code;
      EXPECT_EQ(std::signbit(out[i]), std::signbit(want[code])) << "code " << code;
    }
    EXPECT_EQ(kE2M1[code], want[code]);
  }
}

TEST(Mxfp4, ScaleBytes) {
  EXPECT_EQ(ScaleToFloat(0x7F), 1.0f);
  EXPECT_EQ(ScaleToFloat(0x80), 2.0f);
  EXPECT_EQ(ScaleToFloat(0x7E), 0.5f);
  EXPECT_EQ(ScaleToFloat(0x00), std::ldexp(1.0f, -127));  // subnormal, exact
  EXPECT_GT(ScaleToFloat(0x00), 0.0f);
  EXPECT_EQ(ScaleToFloat(0xFE), std::ldexp(1.0f, 127));
  EXPECT_TRUE(std::isfinite(ScaleToFloat(0xFE)));
  EXPECT_TRUE(std::isnan(ScaleToFloat(0xFF)));
  for (int s = 0; s < 255; ++s) {
    EXPECT_EQ(static_cast<double>(ScaleToFloat(static_cast<uint8_t>(s))), std::ldexp(1.0, s - 127)) << s;
  }
}

TEST(Mxfp4, DecodeMatchesReferenceForEveryScaleAndCode) {
  for (int s : {0x00, 0x01, 0x7F, 0x80, 0xFE, 0xFF}) {
    uint8_t packed[16];
    for (int j = 0; j < 16; ++j) packed[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
    float out[32];
    DecodeBlock(packed, static_cast<uint8_t>(s), out);
    for (int j = 0; j < 16; ++j) {
      const double lo = RefValue(static_cast<uint8_t>(j), static_cast<uint8_t>(s));
      const double hi = RefValue(static_cast<uint8_t>(15 - j), static_cast<uint8_t>(s));
      if (s == 0xFF) {
        // The documented rule: a 0xFF scale makes every element of the block NaN, zeros too.
        EXPECT_TRUE(std::isnan(out[2 * j])) << j;
        EXPECT_TRUE(std::isnan(out[2 * j + 1])) << j;
      } else {
        // In float, 2 * 2^127 and above overflow to +-inf (scale 0xFE, codes >= 2).
        EXPECT_EQ(out[2 * j], static_cast<float>(lo)) << "scale " << s << " j " << j;
        EXPECT_EQ(out[2 * j + 1], static_cast<float>(hi)) << "scale " << s << " j " << j;
      }
    }
  }
}

TEST(Mxfp4, LowNibbleIsEvenElement) {
  uint8_t packed[16] = {};
  packed[0] = 0x72;  // low nibble 2 (1.0) -> element 0, high nibble 7 (6.0) -> element 1
  packed[5] = 0x9C;  // low nibble C (-2) -> element 10, high nibble 9 (-0.5) -> element 11
  float out[32];
  DecodeBlock(packed, 0x80, out);  // scale 2
  EXPECT_EQ(out[0], 2.0f);
  EXPECT_EQ(out[1], 12.0f);
  EXPECT_EQ(out[10], -4.0f);
  EXPECT_EQ(out[11], -1.0f);
  EXPECT_EQ(out[2], 0.0f);
}

TEST(Mxfp4, DecodeRowUsesOneScalePerBlock) {
  std::vector<uint8_t> packed(32, 0x22);  // every element 1.0
  const uint8_t scales[2] = {0x7F, 0x81};
  std::vector<float> out(64);
  DecodeRow(packed.data(), scales, 64, out.data());
  for (int i = 0; i < 32; ++i) EXPECT_EQ(out[i], 1.0f);
  for (int i = 32; i < 64; ++i) EXPECT_EQ(out[i], 4.0f);
}

TEST(Mxfp4, EncodeE2M1RoundsToNearestTiesToEvenCode) {
  for (int code = 0; code < 16; ++code) EXPECT_EQ(EncodeE2M1(kE2M1[code]), code) << code;
  EXPECT_EQ(EncodeE2M1(0.25f), 0);
  EXPECT_EQ(EncodeE2M1(0.26f), 1);
  EXPECT_EQ(EncodeE2M1(0.75f), 2);
  EXPECT_EQ(EncodeE2M1(1.25f), 2);
  EXPECT_EQ(EncodeE2M1(1.75f), 4);
  EXPECT_EQ(EncodeE2M1(2.5f), 4);
  EXPECT_EQ(EncodeE2M1(3.5f), 6);
  EXPECT_EQ(EncodeE2M1(5.0f), 6);
  EXPECT_EQ(EncodeE2M1(5.01f), 7);
  EXPECT_EQ(EncodeE2M1(100.0f), 7);
  EXPECT_EQ(EncodeE2M1(-100.0f), 15);
  EXPECT_EQ(EncodeE2M1(-1.1f), 10);
  EXPECT_EQ(EncodeE2M1(std::nanf("")), 0);
}

// Brute-force twin of EncodeE2M1: the nearest representable magnitude, ties to the even code.
uint8_t RefEncode(float v) {
  uint8_t best = 0;
  double best_err = 1e30;
  for (uint8_t c = 0; c < 8; ++c) {
    const double err = std::fabs(std::fabs(static_cast<double>(v)) - kE2M1[c]);
    if (err < best_err || (err == best_err && c % 2 == 0)) {
      best = c;
      best_err = err;
    }
  }
  return static_cast<uint8_t>(best | (std::signbit(v) ? 8 : 0));
}

TEST(Mxfp4, EncodeE2M1MatchesBruteForce) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-8.0f, 8.0f);
  for (int i = 0; i < 100000; ++i) {
    const float v = u(rng);
    ASSERT_EQ(EncodeE2M1(v), RefEncode(v)) << v;
  }
}

TEST(Mxfp4, EncodeDecodeRoundTripAndErrorBound) {
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 50; ++trial) {
    const int64_t n = 32 * (1 + trial % 7);
    std::normal_distribution<float> nd(0.0f, std::ldexp(1.0f, trial % 20 - 10));
    std::vector<float> x(n);
    for (auto& v : x) v = nd(rng);
    std::vector<uint8_t> packed(n / 2), scales(n / 32);
    EncodeRow(x.data(), n, packed.data(), scales.data());
    std::vector<float> y(n);
    DecodeRow(packed.data(), scales.data(), n, y.data());
    for (int64_t g = 0; g < n / 32; ++g) {
      float amax = 0;
      for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[g * 32 + i]));
      const double scale = std::ldexp(1.0, scales[g] - 127);
      // The block max lands in [4, 8) scale units.
      EXPECT_GE(amax / scale, 4.0);
      EXPECT_LT(amax / scale, 8.0);
      for (int i = 0; i < 32; ++i) {
        const double xi = x[g * 32 + i], yi = y[g * 32 + i];
        const double err = std::fabs(xi - yi);
        // Within range, error is at most half a step (the widest step is 2, between 4 and 6);
        // values in [6, 8) scale units saturate to 6.
        if (std::fabs(xi) / scale <= 6.0) {
          EXPECT_LE(err, 1.0 * scale) << xi << " -> " << yi;
        } else {
          EXPECT_EQ(std::fabs(yi), 6.0 * scale);
        }
        EXPECT_LE(err, amax / 2.0 + 1e-30);
        // Decoded values are representable: re-encoding one at this scale is exact.
        EXPECT_EQ(kE2M1[EncodeE2M1(static_cast<float>(yi / scale))] * scale, yi);
      }
    }
    // Re-encoding the decoded row reproduces the same bytes (a fixed point).
    std::vector<uint8_t> packed2(n / 2), scales2(n / 32);
    EncodeRow(y.data(), n, packed2.data(), scales2.data());
    std::vector<float> z(n);
    DecodeRow(packed2.data(), scales2.data(), n, z.data());
    EXPECT_EQ(y, z);
  }
}

TEST(Mxfp4, EncodeEdgeCases) {
  std::vector<float> x(64, 0.0f);
  uint8_t packed[32], scales[2];
  EncodeRow(x.data(), 64, packed, scales);
  EXPECT_EQ(scales[0], 127);
  for (uint8_t b : packed) EXPECT_EQ(b, 0);
  // Huge and tiny magnitudes clamp the scale byte to [0x00, 0xFE], never 0xFF.
  x.assign(64, 0.0f);
  x[0] = 3e38f;
  x[40] = 1e-44f;
  EncodeRow(x.data(), 64, packed, scales);
  EXPECT_EQ(scales[0], 127 + 127 - 2);  // 3e38 = 1.76 * 2^127
  EXPECT_EQ(scales[1], 0x00);
  float y[64];
  DecodeRow(packed, scales, 64, y);
  EXPECT_EQ(y[0], 6.0f * std::ldexp(1.0f, 125));  // 3e38 / 2^125 = 7.05 saturates to 6
  x[0] = std::numeric_limits<float>::infinity();
  EncodeRow(x.data(), 64, packed, scales);
  EXPECT_LE(scales[0], 0xFE);
  EXPECT_EQ(packed[0] & 0xF, 7);
}

TEST(Mxfp4, FindNanScale) {
  std::vector<uint8_t> s(100, 0x7F);
  EXPECT_EQ(FindNanScale(s.data(), 100), -1);
  s[63] = 0xFF;
  s[80] = 0xFF;
  EXPECT_EQ(FindNanScale(s.data(), 100), 63);
  EXPECT_EQ(FindNanScale(s.data(), 63), -1);
  EXPECT_EQ(FindNanScale(s.data(), 0), -1);
}

}  // namespace
}  // namespace mxserve::mxfp4
