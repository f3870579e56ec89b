// YaRN RoPE tables against the §1.4 formulas, and the rotation itself.
#include "coordinator/models/rope.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "tests/models/tiny_gpt_oss.h"

namespace mxserve::testing {
namespace {

ModelConfig GptOssRopeConfig() {
  ModelConfig c;
  c.head_dim = 64;
  c.rope_theta = 150000.0;
  c.max_position_embeddings = 131072;
  c.rope_scaling = RopeScaling{"yarn", 32.0, 32.0, 1.0, 4096, /*truncate=*/false};
  return c;
}

TEST(Rope, GptOssYarnMatchesFormula) {
  const ModelConfig c = GptOssRopeConfig();
  auto p = ComputeRopeParams(c);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_NEAR(p->low, 8.093, 1e-3);  // corr(32) for d 64, base 150000, L0 4096
  EXPECT_NEAR(p->low, 8.0927791, 1e-6);
  EXPECT_NEAR(p->high, 17.398, 1e-3);
  EXPECT_NEAR(p->high, 17.3980245, 1e-6);
  EXPECT_NEAR(p->concentration, 1.3465736, 1e-6);
  std::vector<double> inv;
  double m, low, high;
  ReferenceGptOss::RopeTable(c, inv, m, low, high);
  EXPECT_NEAR(low, p->low, 1e-12);
  EXPECT_NEAR(high, p->high, 1e-12);
  EXPECT_NEAR(m, 1.3465735902799727, 1e-12);
  ASSERT_EQ(p->inv_freq.size(), 32u);
  for (int i = 0; i < 32; ++i) {
    EXPECT_NEAR(p->inv_freq[i], inv[i], 2e-6 * inv[i]) << i;
  }
  // Ends of the ramp: pure extrapolation below low, pure interpolation (÷32) above high.
  EXPECT_NEAR(p->inv_freq[0], 1.0, 1e-7);
  EXPECT_NEAR(p->inv_freq[8], std::pow(150000.0, -16.0 / 64), 1e-6);
  EXPECT_NEAR(p->inv_freq[18], std::pow(150000.0, -36.0 / 64) / 32, 1e-9);
  EXPECT_NEAR(p->inv_freq[31], std::pow(150000.0, -62.0 / 64) / 32, 1e-12);
}

TEST(Rope, TruncateFloorsAndCeils) {
  ModelConfig c = GptOssRopeConfig();
  c.rope_scaling.truncate = true;
  auto p = ComputeRopeParams(c);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->low, 8.0);
  EXPECT_EQ(p->high, 18.0);
  std::vector<double> inv;
  double m, low, high;
  ReferenceGptOss::RopeTable(c, inv, m, low, high);
  for (int i = 0; i < 32; ++i) EXPECT_NEAR(p->inv_freq[i], inv[i], 2e-6 * inv[i]) << i;
  // truncate changes the table inside the ramp.
  auto q = ComputeRopeParams(GptOssRopeConfig());
  EXPECT_NE(p->inv_freq[12], q->inv_freq[12]);
}

TEST(Rope, DefaultRopeHasNoScaling) {
  ModelConfig c = GptOssRopeConfig();
  c.rope_scaling.rope_type = "default";
  auto p = ComputeRopeParams(c);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->concentration, 1.0f);
  for (int i = 0; i < 32; ++i) {
    EXPECT_NEAR(p->inv_freq[i], std::pow(150000.0, -2.0 * i / 64), 2e-6 * p->inv_freq[i]);
  }
}

TEST(Rope, RejectsUnknownType) {
  ModelConfig c = GptOssRopeConfig();
  c.rope_scaling.rope_type = "longrope";
  auto p = ComputeRopeParams(c);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(std::string(p.status().message()).find("longrope"), std::string::npos);
}

TEST(Rope, HalfSplitRotationWithConcentration) {
  const ModelConfig c = GptOssRopeConfig();
  auto p = ComputeRopeParams(c);
  ASSERT_TRUE(p.ok());
  const int64_t pos = 1234;
  std::vector<float> cs(32), sn(32), x(64), y(64);
  RopeCosSin(*p, pos, cs.data(), sn.data());
  for (int i = 0; i < 64; ++i) x[i] = y[i] = std::sin(0.37 * i + 0.1f);
  ApplyRope(cs.data(), sn.data(), 64, y.data());
  std::vector<double> inv;
  double m, low, high;
  ReferenceGptOss::RopeTable(c, inv, m, low, high);
  for (int i = 0; i < 32; ++i) {
    const double a = pos * inv[i];
    const double c1 = std::cos(a) * m, s1 = std::sin(a) * m;
    EXPECT_NEAR(y[i], x[i] * c1 - x[i + 32] * s1, 2e-4) << i;
    EXPECT_NEAR(y[i + 32], x[i + 32] * c1 + x[i] * s1, 2e-4) << i;
  }
  // |rotated pair| = m * |pair|.
  for (int i = 0; i < 32; ++i) {
    EXPECT_NEAR(std::hypot(y[i], y[i + 32]), m * std::hypot(x[i], x[i + 32]), 1e-5);
  }
}

}  // namespace
}  // namespace mxserve::testing
