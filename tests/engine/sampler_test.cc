#include "coordinator/engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "coordinator/engine/sequence.h"
#include "gtest/gtest.h"
#include "tests/engine/fakes.h"

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
  if (p.min_p > 0) {  // vLLM: probabilities below min_p * the top one are dropped
    const double cut = p.min_p * all[0].second;
    while (all.back().second < cut) all.pop_back();
  }
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
    p.min_p = (rng() % 2 == 0) ? 0.0f : (rng() % 100) / 100.0f;
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
  for (const auto& [k, top_p, min_p] : std::vector<std::tuple<int, float, float>>{
           {0, 1.0f, 0.0f}, {4, 1.0f, 0.0f}, {0, 0.7f, 0.0f}, {0, 1.0f, 0.2f}}) {
    SamplingParams p;
    p.temperature = 0.9f;
    p.top_k = k;
    p.top_p = top_p;
    p.min_p = min_p;
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

// Letters a..z are ids 0..25, ' ' is 26, "xy" is 27 (so " xy" spells differently from "xy").
class LetterTokenizer : public testing::FakeTokenizer {
 public:
  LetterTokenizer() : FakeTokenizer(Pieces()) {}
  static std::vector<std::string> Pieces() {
    std::vector<std::string> p;
    for (char c = 'a'; c <= 'z'; ++c) p.push_back(std::string(1, c));
    p.push_back(" ");
    p.push_back("xy");
    return p;
  }
  std::vector<int32_t> Encode(std::string_view text, bool) const override {
    std::vector<int32_t> ids;
    for (size_t i = 0; i < text.size(); ++i) {
      if (text.substr(i, 2) == "xy") {
        ids.push_back(27);
        ++i;
      } else {
        ids.push_back(text[i] == ' ' ? 26 : text[i] - 'a');
      }
    }
    return ids;
  }
};

// Slow twin of ProcessLogits: every rule over the whole vocabulary, counts from scratch.
std::vector<float> SlowProcess(std::vector<float> l, const Sequence& seq,
                               const std::vector<int32_t>& eos) {
  const SamplingParams& p = seq.params();
  const std::vector<int32_t> prompt(seq.tokens().begin(),
                                    seq.tokens().begin() + seq.num_prompt_tokens());
  const std::vector<int32_t> output(seq.tokens().begin() + seq.num_prompt_tokens(),
                                    seq.tokens().end());
  const float inf = std::numeric_limits<float>::infinity();
  for (const std::vector<int32_t>& w : seq.bad_words_ids()) {
    const size_t k = w.size() - 1;
    if (k > output.size()) continue;
    bool match = true;
    for (size_t i = 0; i < k; ++i) match = match && output[output.size() - k + i] == w[i];
    if (match) l[w.back()] = -inf;
  }
  if (static_cast<int>(output.size()) < p.min_tokens) {
    for (size_t v = 0; v < l.size(); ++v) {
      const bool is_eos = std::count(eos.begin(), eos.end(), v) > 0;
      const bool is_stop = std::count(p.stop_token_ids.begin(), p.stop_token_ids.end(), v) > 0;
      if ((is_eos && !p.ignore_eos) || is_stop) l[v] = -inf;
    }
  }
  for (const auto& [id, b] : p.logit_bias) l[id] += b;
  for (size_t v = 0; v < l.size(); ++v) {
    const int in_prompt = static_cast<int>(std::count(prompt.begin(), prompt.end(), v));
    const int count = static_cast<int>(std::count(output.begin(), output.end(), v));
    if (in_prompt + count > 0) {
      l[v] *= l[v] > 0 ? 1.0f / p.repetition_penalty : p.repetition_penalty;
    }
    l[v] -= p.frequency_penalty * static_cast<float>(count);
    l[v] -= p.presence_penalty * (count > 0 ? 1.0f : 0.0f);
  }
  return l;
}

TEST(SamplerTest, ProcessLogitsMatchesSlowTwin) {
  std::mt19937 rng(17);
  LetterTokenizer tok;
  const int vocab = tok.vocab_size();
  const std::vector<std::string> words = {"ab", "xy", " ba", "c", "abc"};
  for (int trial = 0; trial < 2000; ++trial) {
    GenerateRequest r;
    r.prompt_tokens.resize(1 + rng() % 12);
    for (int32_t& t : r.prompt_tokens) t = rng() % 6;  // a small alphabet: repeats and bad words
    SamplingParams& p = r.params;
    p.max_tokens = 64;
    auto pick = [&](float lo, float hi) { return lo + (hi - lo) * (rng() % 1001) / 1000.0f; };
    if (rng() % 2) p.presence_penalty = pick(-2, 2);
    if (rng() % 2) p.frequency_penalty = pick(-2, 2);
    if (rng() % 2) p.repetition_penalty = pick(0.1f, 2);
    if (rng() % 3 == 0) p.min_tokens = rng() % 8;
    if (rng() % 3 == 0) p.ignore_eos = true;
    if (rng() % 2) p.stop_token_ids = {static_cast<int32_t>(rng() % vocab)};
    for (int k = rng() % 3; k > 0; --k) {
      p.logit_bias.emplace_back(rng() % vocab, pick(-100, 100));
    }
    for (const std::string& w : words) {
      if (rng() % 3 == 0) p.bad_words.push_back(w);
    }
    Sequence seq(1, r, [](GenerationEvent) {}, &tok);
    const int outputs = rng() % 10;
    for (int i = 0; i < outputs; ++i) seq.AppendToken(rng() % 6, std::nullopt, {}, 1 << 20);
    const std::vector<int32_t> eos = {static_cast<int32_t>(rng() % vocab)};
    std::vector<float> l = RandomLogits(rng, vocab);
    const std::vector<float> slow = SlowProcess(l, seq, eos);
    if (Sampler::NeedsProcessing(seq)) {
      Sampler::ProcessLogits(l, seq, eos);
    }
    for (int v = 0; v < vocab; ++v) {
      ASSERT_EQ(l[v], slow[v]) << "trial " << trial << " token " << v;
    }
  }
}

TEST(SamplerTest, BadWordsAsVllmTokenizesThem) {
  LetterTokenizer tok;
  // "ab" -> [0, 1]; " ab" -> [26, 0, 1] is longer: dropped. "xy" -> [27]; " xy" -> [26, 27]
  // longer: dropped. " q" (leading blank stripped) -> [16].
  EXPECT_EQ(BadWordsTokenIds({"ab", "xy", " q"}, tok),
            (std::vector<std::vector<int32_t>>{{0, 1}, {27}, {16}}));
}

TEST(SamplerTest, GreedyAfterProcessingNeverPicksABannedToken) {
  LetterTokenizer tok;
  GenerateRequest r;
  r.prompt_tokens = {0};
  r.params.temperature = 0;
  r.params.max_tokens = 8;
  r.params.bad_words = {"c"};
  r.params.logit_bias = {{4, 100.0f}};  // 'e' is pushed to the top...
  r.params.min_tokens = 2;
  r.params.stop_token_ids = {4};        // ...but is a stop token before min_tokens
  Sequence seq(1, r, [](GenerationEvent) {}, &tok);
  std::vector<float> l(tok.vocab_size(), 0.0f);
  l[2] = 50;  // 'c': banned
  l[3] = 10;  // 'd'
  Sampler::ProcessLogits(l, seq, {});
  std::mt19937_64 rng(1);
  EXPECT_EQ(Sampler::SampleRow(l, r.params, rng), 3);
}

}  // namespace
}  // namespace mxserve
