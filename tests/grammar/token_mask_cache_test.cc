// Token masks from the trie walk against the obvious twin: token t is allowed iff its bytes
// advance the automaton (EOS iff the state accepts); cached masks equal fresh ones.
#include "coordinator/grammar/token_mask_cache.h"

#include <random>
#include <string>

#include "coordinator/grammar/grammar_matcher.h"
#include "coordinator/grammar/structured_output.h"
#include "gtest/gtest.h"
#include "tests/grammar/grammar_test_util.h"

namespace mxserve::grammar {
namespace {

std::vector<std::string> RandomVocab(std::mt19937_64& rng, int n) {
  static const std::string pieces[] = {"{", "}", "\"", ":", ",", " ", "[", "]", "a", "b",
                                       "name", "age", "1", "0", "-", ".", "true", "null",
                                       "\xc3\xa9", "\xc3", "\xa9", "\\", "x"};
  std::vector<std::string> vocab(n);
  for (int i = 0; i < n; ++i) {
    if (i % 17 == 0) continue;  // some ids have no bytes (as specials)
    const int len = std::uniform_int_distribution<int>(1, 4)(rng);
    for (int k = 0; k < len; ++k) vocab[i] += pieces[std::uniform_int_distribution<int>(0, 22)(rng)];
  }
  for (int i = 0; i < 23; ++i) vocab.push_back(pieces[i]);  // every single piece too
  return vocab;
}

TEST(TokenMaskCacheTest, MaskIsExactlyTheTokensTheAutomatonTakes) {
  std::mt19937_64 rng(544);
  const std::vector<std::string> vocab = RandomVocab(rng, 3000);
  const int mask_size = static_cast<int>(vocab.size()) + 5;
  const int32_t eos = static_cast<int32_t>(vocab.size()) + 2;
  auto trie = VocabTrie::FromTokens(vocab, mask_size, {eos});
  StructuredOutputSpec spec;
  spec.kind = StructuredOutputSpec::Kind::kJsonSchema;
  spec.schema = nlohmann::json::parse(
      R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"}},
          "required":["name","age"],"additionalProperties":false})");
  auto g = *CompileStructuredOutput(spec);
  for (int walk = 0; walk < 20; ++walk) {
    GrammarMatcher m(g);
    for (int step = 0; step < 40; ++step) {
      auto mask = m.Mask(*trie);
      ASSERT_EQ(mask->words.size(), static_cast<size_t>((mask_size + 63) / 64));
      std::vector<int32_t> allowed;
      for (int32_t t = 0; t < mask_size; ++t) {
        bool twin = false;
        if (t < static_cast<int32_t>(vocab.size()) && !vocab[t].empty()) {
          twin = g->Advance(m.state(), vocab[t]) != PushdownAutomaton::kDead;
        }
        if (t == eos) twin = m.accepting();
        ASSERT_EQ(mask->allowed(t), twin) << "token " << t << " '"
                                          << (t < static_cast<int32_t>(vocab.size()) ? vocab[t] : "")
                                          << "' at step " << step;
        if (twin && t != eos) allowed.push_back(t);
      }
      EXPECT_EQ(m.Mask(*trie), mask);  // the cached one
      if (allowed.empty()) break;
      const int32_t t = allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng)];
      ASSERT_TRUE(m.Accept(vocab[t]));
    }
  }
}

}  // namespace
}  // namespace mxserve::grammar
