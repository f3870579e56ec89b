#include "coordinator/engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace mxserve {
namespace {

std::vector<float> RandomLogits(std::mt19937& rng, int vocab) {
  std::normal_distribution<float> d(0.0f, 2.0f);
  std::vector<float> l(vocab);
  for (float& x : l) x = d(rng);
  return l;
}

// Slow twin of FilteredDistribution: softmax over everything, sort, cut, renormalize.
std::vector<std::pair<int32_t, double>> SlowFiltered(const std::vector<float>& l,
                                                     const SamplingParams& p) {
  std::vector<std::pair<int32_t, double>> all;
  double z = 0;
  for (size_t i = 0; i < l.size(); ++i) {
    all.emplace_back(static_cast<int32_t>(i), std::exp(l[i] / static_cast<double>(p.temperature)));
    z += all.back().second;
  }
  for (auto& e : all) e.second /= z;
  std::stable_sort(all.begin(), all.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  if (p.top_k > 0 && p.top_k < static_cast<int>(all.size())) all.resize(p.top_k);
  double kept = 0;
  for (auto& e : all) kept += e.second;
  for (auto& e : all) e.second /= kept;
  if (p.top_p < 1.0f) {
    double cum = 0;
    size_t n = 0;
    while (n < all.size()) {
      cum += all[n++].second;
      if (cum >= p.top_p) break;
    }
    all.resize(n);
    for (auto& e : all) e.second /= cum;
  }
  return all;
}

TEST(SamplerTest, ArgmaxTiesGoToLowestId) {
  std::vector<float> l = {1.0f, 3.0f, 2.0f, 3.0f};
  EXPECT_EQ(Sampler::Argmax(l), 1);
  SamplingParams p;
  p.temperature = 0;
  std::mt19937_64 rng(1);
  EXPECT_EQ(Sampler::SampleRow(l, p, rng), 1);
}

TEST(SamplerTest, FilteredDistributionMatchesSlowTwin) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    // Small vocabularies, and large ones where the nucleus search sorts a growing prefix.
    const int vocab = trial % 3 == 2 ? 2000 + rng() % 30000 : 1 + rng() % 80;
    const std::vector<float> l = RandomLogits(rng, vocab);
    SamplingParams p;
    p.temperature = 0.2f + (rng() % 100) / 50.0f;
    p.top_k = (rng() % 3 == 0) ? 0 : 1 + rng() % 20;
    p.top_p = (rng() % 3 == 0) ? 1.0f : 0.05f + (rng() % 95) / 100.0f;
    const auto fast = Sampler::FilteredDistribution(l, p);
    const auto slow = SlowFiltered(l, p);
    ASSERT_EQ(fast.size(), slow.size()) << "trial " << trial;
    for (size_t i = 0; i < fast.size(); ++i) {
      EXPECT_EQ(fast[i].first, slow[i].first) << "trial " << trial << " rank " << i;
      EXPECT_NEAR(fast[i].second, slow[i].second, 1e-9);
    }
  }
}

// Empirical frequencies of SampleRow follow the filtered distribution (unfiltered fast path too).
TEST(SamplerTest, SampleFrequenciesFollowDistribution) {
  std::mt19937 gen(5);
  const std::vector<float> l = RandomLogits(gen, 12);
  for (const auto& [k, top_p] : std::vector<std::pair<int, float>>{{0, 1.0f}, {4, 1.0f}, {0, 0.7f}}) {
    SamplingParams p;
    p.temperature = 0.9f;
    p.top_k = k;
    p.top_p = top_p;
    const auto dist = SlowFiltered(l, p);
    std::map<int32_t, int> counts;
    std::mt19937_64 rng(123);
    const int n = 40000;
    for (int i = 0; i < n; ++i) ++counts[Sampler::SampleRow(l, p, rng)];
    std::map<int32_t, double> want;
    for (const auto& [id, pr] : dist) want[id] = pr;
    for (const auto& [id, c] : counts) {
      ASSERT_TRUE(want.count(id)) << "sampled filtered-out token " << id;
      EXPECT_NEAR(c / static_cast<double>(n), want[id], 0.012) << "k=" << k << " id " << id;
    }
  }
}

TEST(SamplerTest, TopK1AndTinyTopPAreGreedy) {
  std::mt19937 gen(9);
  for (int trial = 0; trial < 50; ++trial) {
    const std::vector<float> l = RandomLogits(gen, 64);
    std::mt19937_64 rng(trial);
    SamplingParams k1;
    k1.temperature = 1.5f;
    k1.top_k = 1;
    SamplingParams tiny_p;
    tiny_p.temperature = 1.5f;
    tiny_p.top_p = 1e-6f;
    EXPECT_EQ(Sampler::SampleRow(l, k1, rng), Sampler::Argmax(l));
    EXPECT_EQ(Sampler::SampleRow(l, tiny_p, rng), Sampler::Argmax(l));
  }
}

TEST(SamplerTest, LogprobIsLogSoftmaxOfRawLogits) {
  std::mt19937 gen(3);
  const std::vector<float> l = RandomLogits(gen, 30);
  double z = 0;
  for (float x : l) z += std::exp(static_cast<double>(x));
  const TokenLogprob lp = Sampler::Logprob(l, 7, 20);
  EXPECT_NEAR(lp.logprob, l[7] - std::log(z), 1e-5);
  ASSERT_EQ(lp.top.size(), 20u);
  std::vector<int32_t> order(30);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return l[a] > l[b]; });
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(lp.top[i].token_id, order[i]);
    EXPECT_NEAR(lp.top[i].logprob, l[order[i]] - std::log(z), 1e-5);
  }
  EXPECT_TRUE(Sampler::Logprob(l, 7, 0).top.empty());
}

}  // namespace
}  // namespace mxserve
