// The golden fixtures of tests/data/golden/ through real processes: mxserve-coordinator with
// `--local-workers 2` (experts in two mxserve-worker processes over gRPC) and with 0 (one
// process), asked over HTTP /v1/completions with the prompt as token ids, temperature 0,
// ignore_eos, echo + logprobs (prompt logprobs) and return_tokens_as_token_ids. HF's greedy
// tokens must come back token for token, and every logprob (prompt and generated, chosen and
// top-5) must equal HF's log-softmax.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/integration/harness.h"
#include "tests/models/golden/golden_fixture.h"

namespace mxserve::testing {
namespace {

using json = nlohmann::json;

// fp32 logits agree to ~1e-6 relative; log-softmax values of size ~10 to a few 1e-5.
constexpr double kLogprobTol = 2e-3;

int IdOf(const std::string& token) {  // "token_id:N"
  EXPECT_EQ(token.rfind("token_id:", 0), 0u) << token;
  return std::stoi(token.substr(9));
}

void CheckTop(const json& top, const float* row, int vocab, const std::string& where) {
  ASSERT_TRUE(top.is_object()) << where;
  ASSERT_EQ(top.size(), 5u) << where;
  for (const auto& [tok, lp] : top.items()) {
    const int id = IdOf(tok);
    ASSERT_GE(id, 0);
    ASSERT_LT(id, vocab);
    EXPECT_NEAR(lp.get<double>(), LogSoftmaxAt(row, vocab, id), kLogprobTol) << where;
  }
  // The top-5 are HF's top-5 (by HF's logits; ties at the 5th place would be allowed).
  std::vector<float> sorted(row, row + vocab);
  std::nth_element(sorted.begin(), sorted.begin() + 4, sorted.end(), std::greater<float>());
  const float fifth = sorted[4];
  for (const auto& [tok, lp] : top.items()) {
    EXPECT_GE(row[IdOf(tok)], fifth - 1e-4f) << where << " " << tok;
  }
}

void CheckFixture(const std::string& name, const std::vector<std::string>& flags) {
  const GoldenFixture fx = LoadGolden(name);
  ASSERT_EQ(fx.prompts.size(), 3u) << fx.dir;
  TempDir logs;
  auto c = StartCoordinator(fx.dir, flags, logs.path());
  ASSERT_TRUE(c.has_value());
  const int V = fx.vocab;
  for (size_t pi = 0; pi < fx.prompts.size(); ++pi) {
    const GoldenPrompt& g = fx.prompts[pi];
    SCOPED_TRACE(name + " prompt " + std::to_string(pi));
    json req{{"prompt", g.prompt},
             {"max_tokens", g.greedy.size()},
             {"temperature", 0},
             {"ignore_eos", true},
             {"echo", true},
             {"logprobs", 5},
             {"return_tokens_as_token_ids", true}};
    HttpResponse r = HttpCall(c->http_port, "POST", "/v1/completions", req.dump());
    ASSERT_EQ(r.status, 200) << r.body;
    json body = json::parse(r.body);
    const json& lp = body["choices"][0]["logprobs"];
    const size_t P = g.prompt.size(), N = g.greedy.size();
    ASSERT_EQ(lp["tokens"].size(), P + N) << r.body;
    std::vector<int32_t> prompt_back, gen;
    for (size_t i = 0; i < P + N; ++i) {
      (i < P ? prompt_back : gen).push_back(IdOf(lp["tokens"][i].get<std::string>()));
    }
    EXPECT_EQ(prompt_back, g.prompt);
    EXPECT_EQ(gen, g.greedy);  // HF's greedy generation, token for token
    EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(body["usage"]["completion_tokens"], N);
    // Position i (i >= 1) is predicted by row i - 1 of HF's logits.
    EXPECT_TRUE(lp["token_logprobs"][0].is_null());
    for (size_t i = 1; i < P + N; ++i) {
      const float* row = &g.logits[(i - 1) * V];
      const int tok = i < P ? g.prompt[i] : g.greedy[i - P];
      const std::string where = "position " + std::to_string(i);
      ASSERT_TRUE(lp["token_logprobs"][i].is_number()) << where;
      EXPECT_NEAR(lp["token_logprobs"][i].get<double>(), LogSoftmaxAt(row, V, tok), kLogprobTol)
          << where;
      CheckTop(lp["top_logprobs"][i], row, V, where);
    }
  }
}

class HfGoldenE2e : public ::testing::TestWithParam<std::string> {};

TEST_P(HfGoldenE2e, TwoWorkersMatchTransformers) {
  CheckFixture(GetParam(), {"--local-workers", "2", "--threads", "1"});
}

TEST_P(HfGoldenE2e, SingleProcessMatchesTransformers) {
  CheckFixture(GetParam(), {"--local-workers", "0", "--threads", "1"});
}

INSTANTIATE_TEST_SUITE_P(Configs, HfGoldenE2e, ::testing::ValuesIn(GoldenNames()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace mxserve::testing
