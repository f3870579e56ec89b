// The MoE kernels against each other and against a float64 oracle written here, on fresh
// seeded random inputs with realistic MXFP4 scales.
//
// Tolerance (stated): for every output element, |kernel - float64| <= 5e-6 * mag, where
// mag = sum over the token's slots of |w_j| * (sum_i |Wd[h,i]| |a_i| + |b_h|) + 1e-30 is the
// size of the terms that were summed (float64). float32 sums of a few thousand terms in a
// different order stay well inside that; a wrong index or a dropped term does not.
// Fast vs reference is held to 5e-6 * mag (both are float32, only the summation order
// differs), and to bit-identical results across thread counts.
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "gtest/gtest.h"
#include "kernels/moe/moe.h"
#include "kernels/moe/moe_fast.h"

namespace mxserve::kernels {
namespace {

using internal::MoeIsa;

constexpr double kE2M1[16] = {0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6};

struct RandomMatrix {
  std::vector<uint8_t> blocks, scales;
  Mxfp4Matrix m;
  RandomMatrix(int rows, int cols, std::mt19937& rng) {
    blocks.resize(static_cast<size_t>(rows) * cols / 2);
    scales.resize(static_cast<size_t>(rows) * cols / 32);
    std::uniform_int_distribution<int> byte(0, 255), scale(118, 127);
    for (auto& b : blocks) b = static_cast<uint8_t>(byte(rng));
    for (auto& s : scales) s = static_cast<uint8_t>(scale(rng));
    m = {blocks.data(), scales.data(), rows, cols};
  }
  double At(int r, int c) const {
    const uint8_t byte = blocks[(static_cast<size_t>(r) * m.cols + c) / 2];
    const int code = (c % 2 == 0) ? (byte & 0x0F) : (byte >> 4);
    const uint8_t s = scales[(static_cast<size_t>(r) * m.cols + c) / 32];
    if (s == 0xFF) return std::nan("");
    return kE2M1[code] * std::ldexp(1.0, static_cast<int>(s) - 127);
  }
};

struct RandomExpert {
  RandomMatrix gate_up, down;
  std::vector<float> gate_up_bias, down_bias;
  ExpertWeights w;
  RandomExpert(int H, int I, std::mt19937& rng) : gate_up(2 * I, H, rng), down(H, I, rng) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    gate_up_bias.resize(2 * I);
    down_bias.resize(H);
    for (auto& b : gate_up_bias) b = u(rng);
    for (auto& b : down_bias) b = u(rng);
    w = {gate_up.m, gate_up_bias.data(), down.m, down_bias.data()};
  }
};

struct RandomLayer {
  std::vector<std::unique_ptr<RandomExpert>> storage;
  MoeLayer layer;
  RandomLayer(int H, int I, int E, uint32_t seed, const std::vector<bool>& held = {}) {
    std::mt19937 rng(seed);
    layer.hidden = H;
    layer.intermediate = I;
    layer.experts.assign(E, nullptr);
    for (int e = 0; e < E; ++e) {
      storage.push_back(std::make_unique<RandomExpert>(H, I, rng));
      if (held.empty() || held[e]) layer.experts[e] = &storage.back()->w;
    }
  }
  RandomExpert& expert(int e) { return *storage[e]; }
};

struct RandomBatch {
  std::vector<float> x, weights;
  std::vector<int32_t> ids;
  MoeBatch batch;
  // Routes each token to k distinct experts among `allowed`; a slot is -1 with probability
  // p_skip.
  RandomBatch(int T, int H, int k, const std::vector<int>& allowed, uint32_t seed,
              double p_skip = 0.0) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nx(0.0f, 1.0f);
    std::uniform_real_distribution<float> uw(0.05f, 1.0f), u01(0.0f, 1.0f);
    x.resize(static_cast<size_t>(T) * H);
    for (auto& v : x) v = nx(rng);
    ids.resize(static_cast<size_t>(T) * k);
    weights.resize(static_cast<size_t>(T) * k);
    for (int t = 0; t < T; ++t) {
      std::vector<int> pool = allowed;
      std::shuffle(pool.begin(), pool.end(), rng);
      for (int j = 0; j < k; ++j) {
        ids[t * k + j] = (u01(rng) < p_skip) ? -1 : pool[j % pool.size()];
        weights[t * k + j] = uw(rng);
      }
    }
    batch = {T, k, x.data(), ids.data(), weights.data()};
  }
};

struct Oracle {
  std::vector<double> out, mag;
};

double SwiGlu64(double g, double u, double alpha, double limit) {
  if (g > limit) g = limit;
  if (u > limit) u = limit;
  if (u < -limit) u = -limit;
  return (u + 1.0) * g / (1.0 + std::exp(-alpha * g));
}

Oracle Float64Oracle(const RandomLayer& rl, const MoeBatch& b) {
  const MoeLayer& L = rl.layer;
  const int H = L.hidden, I = L.intermediate, k = b.top_k;
  Oracle o;
  o.out.assign(static_cast<size_t>(b.num_tokens) * H, 0.0);
  o.mag.assign(static_cast<size_t>(b.num_tokens) * H, 1e-30);
  std::vector<double> act(I);
  for (int t = 0; t < b.num_tokens; ++t) {
    for (int j = 0; j < k; ++j) {
      const int e = b.expert_ids[t * k + j];
      if (e < 0) continue;
      const RandomExpert& ex = *rl.storage[e];
      for (int i = 0; i < I; ++i) {
        const bool bias = ex.w.gate_up_bias != nullptr;
        double g = bias ? ex.gate_up_bias[2 * i] : 0.0, u = bias ? ex.gate_up_bias[2 * i + 1] : 0.0;
        for (int c = 0; c < H; ++c) {
          g += ex.gate_up.At(2 * i, c) * b.x[t * H + c];
          u += ex.gate_up.At(2 * i + 1, c) * b.x[t * H + c];
        }
        act[i] = L.activation == MoeActivation::kSwiGlu ? g / (1.0 + std::exp(-g)) * u
                                                        : SwiGlu64(g, u, L.swiglu_alpha, L.swiglu_limit);
      }
      const double wt = b.weights[t * k + j];
      for (int h = 0; h < H; ++h) {
        const double db = ex.w.down_bias != nullptr ? ex.down_bias[h] : 0.0;
        double y = db, m = std::fabs(db);
        for (int i = 0; i < I; ++i) {
          const double w = ex.down.At(h, i);
          y += w * act[i];
          m += std::fabs(w * act[i]);
        }
        o.out[t * H + h] += wt * y;
        o.mag[t * H + h] += std::fabs(wt) * m;
      }
    }
  }
  return o;
}

std::vector<MoeIsa> Isas() {
  std::vector<MoeIsa> v;
  for (MoeIsa isa : {MoeIsa::kScalar, MoeIsa::kAvx2, MoeIsa::kAvx512}) {
    if (internal::MoeIsaAvailable(isa)) v.push_back(isa);
  }
  return v;
}

// Returns max |a - b| / mag over all elements.
double MaxScaledError(const std::vector<float>& a, const std::vector<double>& b,
                      const std::vector<double>& mag) {
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]) / mag[i]);
  }
  return worst;
}

struct Shape {
  int H, I, E, T, k;
};

class MoeKernelsTest : public ::testing::TestWithParam<Shape> {};

TEST_P(MoeKernelsTest, FastMatchesReferenceAndFloat64) {
  const Shape s = GetParam();
  const uint32_t seed = 1000 + s.H * 7 + s.I * 13 + s.T * 31 + s.k;
  RandomLayer rl(s.H, s.I, s.E, seed);
  std::vector<int> all(s.E);
  for (int e = 0; e < s.E; ++e) all[e] = e;
  RandomBatch rb(s.T, s.H, s.k, all, seed + 1, /*p_skip=*/0.1);
  const Oracle o = Float64Oracle(rl, rb.batch);
  std::vector<float> ref(static_cast<size_t>(s.T) * s.H, -1.0f);
  ASSERT_TRUE(MoeForwardReference(rl.layer, rb.batch, ref.data()).ok());
  const double ref_err = MaxScaledError(ref, o.out, o.mag);
  EXPECT_LE(ref_err, 5e-6) << "reference vs float64";
  ThreadPool pool(2);
  for (MoeIsa isa : Isas()) {
    std::vector<float> fast(ref.size(), -1.0f);
    ASSERT_TRUE(internal::MoeForwardFastIsa(rl.layer, rb.batch, fast.data(), &pool, isa).ok());
    std::vector<double> refd(ref.begin(), ref.end());
    EXPECT_LE(MaxScaledError(fast, o.out, o.mag), 5e-6) << internal::MoeIsaName(isa)
                                                        << " vs float64";
    EXPECT_LE(MaxScaledError(fast, refd, o.mag), 5e-6) << internal::MoeIsaName(isa)
                                                       << " vs reference";
  }
  std::vector<float> best(ref.size());
  ASSERT_TRUE(MoeForwardFast(rl.layer, rb.batch, best.data(), nullptr).ok());
  EXPECT_LE(MaxScaledError(best, o.out, o.mag), 5e-6);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MoeKernelsTest,
    ::testing::Values(Shape{64, 64, 8, 1, 4}, Shape{64, 64, 8, 3, 4}, Shape{64, 64, 8, 17, 1},
                      Shape{64, 64, 8, 129, 4}, Shape{96, 64, 6, 17, 4},
                      Shape{64, 128, 5, 3, 1}, Shape{256, 256, 8, 17, 4},
                      Shape{64, 64, 8, 1031, 4},  // more than two 512-token chunks
                      Shape{2880, 2880, 4, 1, 2},
                      // K long enough that the fast path splits it into chunks (several
                      // tokens per expert): 2560 = 80 blocks.
                      Shape{2560, 2560, 2, 7, 2}),
    [](const ::testing::TestParamInfo<Shape>& p) {
      const Shape& s = p.param;
      return "H" + std::to_string(s.H) + "_I" + std::to_string(s.I) + "_E" +
             std::to_string(s.E) + "_T" + std::to_string(s.T) + "_k" + std::to_string(s.k);
    });

// DeepSeek-V3 / Kimi K2 experts: plain SwiGLU (silu(g) * u), no biases, in every kernel. Gate
// values reach past gpt-oss's clamp limit, so the clamped activation would differ.
TEST(MoeKernels, PlainSwiGluWithoutBiasesMatchesFloat64) {
  const Shape s{128, 64, 8, 37, 3};
  RandomLayer rl(s.H, s.I, s.E, 77);
  rl.layer.activation = MoeActivation::kSwiGlu;
  for (auto& e : rl.storage) e->w.gate_up_bias = e->w.down_bias = nullptr;
  std::vector<int> all(s.E);
  for (int e = 0; e < s.E; ++e) all[e] = e;
  RandomBatch rb(s.T, s.H, s.k, all, 78, /*p_skip=*/0.1);
  for (float& v : rb.x) v *= 8.0f;
  const Oracle o = Float64Oracle(rl, rb.batch);
  std::vector<float> ref(static_cast<size_t>(s.T) * s.H, -1.0f);
  ASSERT_TRUE(MoeForwardReference(rl.layer, rb.batch, ref.data()).ok());
  EXPECT_LE(MaxScaledError(ref, o.out, o.mag), 5e-6) << "reference vs float64";
  ThreadPool pool(2);
  for (MoeIsa isa : Isas()) {
    std::vector<float> fast(ref.size(), -1.0f);
    ASSERT_TRUE(internal::MoeForwardFastIsa(rl.layer, rb.batch, fast.data(), &pool, isa).ok());
    EXPECT_LE(MaxScaledError(fast, o.out, o.mag), 5e-6) << internal::MoeIsaName(isa);
  }
  // The same weights under the clamped activation give a different answer (the kind matters).
  rl.layer.activation = MoeActivation::kClampedSwiGlu;
  std::vector<float> clamped(ref.size());
  ASSERT_TRUE(MoeForwardReference(rl.layer, rb.batch, clamped.data()).ok());
  EXPECT_GT(MaxScaledError(clamped, o.out, o.mag), 1e-2);
}

TEST(MoeKernels, NoTokensIsOkAndTouchesNothing) {
  RandomLayer rl(64, 64, 4, 7);
  MoeBatch b{0, 4, nullptr, nullptr, nullptr};
  EXPECT_TRUE(MoeForwardReference(rl.layer, b, nullptr).ok());
  for (MoeIsa isa : Isas()) {
    EXPECT_TRUE(internal::MoeForwardFastIsa(rl.layer, b, nullptr, nullptr, isa).ok());
  }
}

TEST(MoeKernels, ExpertsWithoutTokensAndSkippedSlots) {
  // 16 experts, only 3 of them used; a third of the slots skipped; some tokens get no slot.
  RandomLayer rl(64, 96, 16, 11);
  RandomBatch rb(33, 64, 4, {2, 9, 13}, 12, /*p_skip=*/0.35);
  for (int j = 0; j < 4; ++j) rb.ids[5 * 4 + j] = -1;  // token 5: nothing
  const Oracle o = Float64Oracle(rl, rb.batch);
  std::vector<float> ref(33 * 64), fast(33 * 64, 5.0f);
  ASSERT_TRUE(MoeForwardReference(rl.layer, rb.batch, ref.data()).ok());
  EXPECT_LE(MaxScaledError(ref, o.out, o.mag), 5e-6);
  for (MoeIsa isa : Isas()) {
    std::fill(fast.begin(), fast.end(), 5.0f);
    ASSERT_TRUE(internal::MoeForwardFastIsa(rl.layer, rb.batch, fast.data(), nullptr, isa).ok());
    EXPECT_LE(MaxScaledError(fast, o.out, o.mag), 5e-6) << internal::MoeIsaName(isa);
    for (int h = 0; h < 64; ++h) EXPECT_EQ(fast[5 * 64 + h], 0.0f);
  }
}

TEST(MoeKernels, AllSlotsSkippedGivesZeros) {
  RandomLayer rl(64, 64, 4, 3);
  RandomBatch rb(3, 64, 2, {0, 1}, 4, /*p_skip=*/1.0);
  std::vector<float> out(3 * 64, 9.0f);
  ASSERT_TRUE(MoeForwardFast(rl.layer, rb.batch, out.data(), nullptr).ok());
  for (float v : out) EXPECT_EQ(v, 0.0f);
  std::fill(out.begin(), out.end(), 9.0f);
  ASSERT_TRUE(MoeForwardReference(rl.layer, rb.batch, out.data()).ok());
  for (float v : out) EXPECT_EQ(v, 0.0f);
}

TEST(MoeKernels, ThreadCountDoesNotChangeBits) {
  RandomLayer rl(256, 192, 8, 21);
  RandomBatch rb(129, 256, 4, {0, 1, 2, 3, 4, 5, 6, 7}, 22, 0.05);
  ThreadPool p1(1), p2(2), p4(4);
  for (MoeIsa isa : Isas()) {
    std::vector<float> base(129 * 256);
    ASSERT_TRUE(internal::MoeForwardFastIsa(rl.layer, rb.batch, base.data(), nullptr, isa).ok());
    for (ThreadPool* p : {&p1, &p2, &p4}) {
      std::vector<float> out(base.size(), 1.0f);
      ASSERT_TRUE(internal::MoeForwardFastIsa(rl.layer, rb.batch, out.data(), p, isa).ok());
      EXPECT_EQ(0, std::memcmp(out.data(), base.data(), base.size() * sizeof(float)))
          << internal::MoeIsaName(isa) << " threads=" << p->size();
    }
  }
}

// Scale byte 0xFF is NaN (core/mxfp4.h): it must reach the outputs it feeds, and only those.
TEST(MoeKernels, NanScalePropagates) {
  RandomLayer rl(64, 64, 4, 31);
  rl.expert(2).gate_up.scales[5 * 2 + 1] = 0xFF;  // gate_up row 5 -> act[2] of expert 2
  rl.expert(1).down.scales[7 * 2 + 0] = 0xFF;     // down row 7 of expert 1 -> out[:, 7]
  RandomBatch rb(4, 64, 1, {0}, 32);
  rb.ids = {0, 2, 1, 3};
  std::vector<float> ref(4 * 64);
  ASSERT_TRUE(MoeForwardReference(rl.layer, rb.batch, ref.data()).ok());
  auto check = [](const std::vector<float>& v, const std::string& what) {
    for (int h = 0; h < 64; ++h) {
      EXPECT_TRUE(std::isfinite(v[0 * 64 + h])) << what;
      EXPECT_TRUE(std::isnan(v[1 * 64 + h])) << what << " h=" << h;
      EXPECT_EQ(std::isnan(v[2 * 64 + h]), h == 7) << what << " h=" << h;
      EXPECT_TRUE(std::isfinite(v[3 * 64 + h])) << what;
    }
  };
  check(ref, "reference");
  for (MoeIsa isa : Isas()) {
    std::vector<float> fast(4 * 64);
    ASSERT_TRUE(internal::MoeForwardFastIsa(rl.layer, rb.batch, fast.data(), nullptr, isa).ok());
    check(fast, internal::MoeIsaName(isa));
  }
}

TEST(MoeKernels, ValidationErrorsNameTheExpert) {
  RandomLayer rl(64, 64, 4, 41, {true, true, false, true});
  std::vector<float> out(2 * 64);
  auto run_both = [&](const RandomBatch& rb, const std::string& needle) {
    for (int which = 0; which < 2; ++which) {
      absl::Status s = which == 0 ? MoeForwardReference(rl.layer, rb.batch, out.data())
                                  : MoeForwardFast(rl.layer, rb.batch, out.data(), nullptr);
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
      EXPECT_NE(std::string(s.message()).find(needle), std::string::npos) << s;
    }
  };
  RandomBatch rb(2, 64, 2, {0, 1}, 42);
  rb.ids = {0, 1, 3, 9};
  run_both(rb, "expert 9");
  rb.ids = {0, 1, 3, -2};
  run_both(rb, "expert -2");
  rb.ids = {0, 2, 3, 1};
  run_both(rb, "expert 2");
  EXPECT_TRUE(ValidateMoeBatch(rl.layer, rb.batch).message().find("not held") !=
              std::string::npos);

  rb.ids = {0, 1, 3, 1};
  rb.batch.top_k = 0;
  EXPECT_EQ(ValidateMoeBatch(rl.layer, rb.batch).code(), absl::StatusCode::kInvalidArgument);
  rb.batch.top_k = 2;
  EXPECT_TRUE(ValidateMoeBatch(rl.layer, rb.batch).ok());

  RandomLayer bad(64, 64, 2, 43);
  bad.expert(1).w.down.cols = 32;
  RandomBatch rb2(1, 64, 1, {1}, 44);
  absl::Status s = ValidateMoeBatch(bad.layer, rb2.batch);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("expert 1"), std::string::npos) << s;
}

}  // namespace
}  // namespace mxserve::kernels
