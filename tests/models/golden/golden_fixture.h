// The HF golden fixtures of tests/data/golden/ (tools/golden/): a model folder, its prompts,
// HF's greedy generations and HF's fp32 logits for every prompt position and generation step.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace mxserve::testing {

struct GoldenPrompt {
  std::vector<int32_t> prompt;
  std::vector<int32_t> greedy;   // HF's 20 greedy tokens (no EOS stop)
  std::vector<float> logits;     // [rows][vocab], rows = prompt + greedy - 1
  int rows = 0;
  // The token sequence the logits rows are for: prompt + greedy[:-1].
  std::vector<int32_t> Sequence() const {
    std::vector<int32_t> s = prompt;
    s.insert(s.end(), greedy.begin(), greedy.end() - 1);
    return s;
  }
};

struct GoldenFixture {
  std::string dir;
  int vocab = 0;
  std::vector<GoldenPrompt> prompts;
};

inline std::vector<std::string> GoldenNames() { return {"top4_4l", "top2_3l", "top4_2l_rope8"}; }

inline std::string GoldenDir(const std::string& name) {
  return std::string(MXSERVE_GOLDEN_TESTDATA) + "/" + name;
}

// Empty prompts on a missing or malformed fixture (the test then fails on the sizes).
inline GoldenFixture LoadGolden(const std::string& name) {
  GoldenFixture f;
  f.dir = GoldenDir(name);
  std::ifstream cj(f.dir + "/config.json"), hj(f.dir + "/hf.json");
  nlohmann::json config = nlohmann::json::parse(cj, nullptr, false);
  nlohmann::json hf = nlohmann::json::parse(hj, nullptr, false);
  if (config.is_discarded() || hf.is_discarded()) return f;
  f.vocab = config.value("vocab_size", 0);
  std::ifstream lf(f.dir + "/hf_logits.f32", std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(lf)), std::istreambuf_iterator<char>());
  std::vector<float> all(bytes.size() / sizeof(float));
  std::memcpy(all.data(), bytes.data(), all.size() * sizeof(float));
  size_t at = 0;
  for (const auto& p : hf["prompts"]) {
    GoldenPrompt g;
    g.prompt = p["prompt"].get<std::vector<int32_t>>();
    g.greedy = p["greedy"].get<std::vector<int32_t>>();
    g.rows = p["rows"].get<int>();
    const size_t n = static_cast<size_t>(g.rows) * f.vocab;
    if (at + n > all.size()) return f;
    g.logits.assign(all.begin() + at, all.begin() + at + n);
    at += n;
    f.prompts.push_back(std::move(g));
  }
  return f;
}

// log_softmax(row)[id] in double.
inline double LogSoftmaxAt(const float* row, int vocab, int id) {
  double m = row[0];
  for (int i = 1; i < vocab; ++i) m = std::max(m, static_cast<double>(row[i]));
  double s = 0;
  for (int i = 0; i < vocab; ++i) s += std::exp(static_cast<double>(row[i]) - m);
  return static_cast<double>(row[id]) - m - std::log(s);
}

inline int ArgmaxF(const float* v, int n) {
  int best = 0;
  for (int i = 1; i < n; ++i) {
    if (v[i] > v[best]) best = i;
  }
  return best;
}

// ||a - b|| / ||b|| in double.
inline double RelL2F(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    num += d * d;
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

}  // namespace mxserve::testing
