#include "coordinator/engine/sequence.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/engine/fakes.h"

namespace mxserve {
namespace {

using testing::FakeTokenizer;

// 0:"ab" 1:"c" 2:"d" 3:"e" 4:"x" 5,6: the two bytes of "é" 7:"</s>" (special) 8:"cd" 9:"ef"
const FakeTokenizer& Tok() {
  static const FakeTokenizer tok({"ab", "c", "d", "e", "x", "\xC3", "\xA9", "</s>", "cd", "ef"}, {7});
  return tok;
}

struct Fed {
  std::vector<GenerationEvent> events;
  std::string text;
};

Fed Feed(SamplingParams params, const std::vector<int32_t>& outputs, std::vector<int32_t> eos = {},
         int max_model_len = 1000) {
  GenerateRequest req;
  req.request_id = "r";
  req.prompt_tokens = {0, 1};
  req.params = std::move(params);
  Sequence seq(1, std::move(req), [](GenerationEvent) {}, &Tok());
  Fed run;
  for (int32_t t : outputs) {
    if (seq.finished()) break;
    run.events.push_back(seq.AppendToken(t, std::nullopt, eos, max_model_len));
    run.text += run.events.back().text;
  }
  return run;
}

SamplingParams WithStop(std::vector<std::string> stop, int max_tokens = 16) {
  SamplingParams p;
  p.stop = std::move(stop);
  p.max_tokens = max_tokens;
  return p;
}

TEST(SequenceTest, StopStringAcrossTokensIsHeldBackThenCut) {
  Fed r = Feed(WithStop({"cde"}), {0, 1, 2, 3, 4});
  ASSERT_EQ(r.events.size(), 4u);  // finishes on the 4th token
  EXPECT_EQ(r.events[0].text, "ab");
  EXPECT_EQ(r.events[1].text, "");  // "c" might start "cde"
  EXPECT_EQ(r.events[2].text, "");  // "cd" still might
  EXPECT_TRUE(r.events[3].finished);
  EXPECT_EQ(r.events[3].finish_reason, FinishReason::kStop);
  EXPECT_EQ(r.events[3].stop_reason, "cde");
  EXPECT_EQ(r.text, "ab");
  EXPECT_EQ(r.events[3].completion_tokens, 4);
  EXPECT_EQ(r.events[3].token_ids, std::vector<int32_t>{3});
}

TEST(SequenceTest, StopStringInsideTokensCutsMidToken) {
  Fed r = Feed(WithStop({"de"}), {0, 8, 9});
  ASSERT_EQ(r.events.size(), 3u);
  EXPECT_EQ(r.events[1].text, "c");  // "d" held back
  EXPECT_EQ(r.events[2].stop_reason, "de");
  EXPECT_EQ(r.text, "abc");
}

TEST(SequenceTest, HeldBackTextIsReleasedWhenItIsNotAStop) {
  Fed r = Feed(WithStop({"cde"}), {0, 1, 4, 1});
  EXPECT_EQ(r.events[1].text, "");
  EXPECT_EQ(r.events[2].text, "cx");
  EXPECT_EQ(r.events[3].text, "");
  EXPECT_FALSE(r.events[3].finished);
  // Held-back text is released when the request ends for another reason.
  Fed len = Feed(WithStop({"cde"}, 2), {0, 1});
  ASSERT_EQ(len.events.size(), 2u);
  EXPECT_EQ(len.events[1].finish_reason, FinishReason::kLength);
  EXPECT_EQ(len.text, "abc");
}

TEST(SequenceTest, EarliestOfSeveralStopStringsWins) {
  Fed r = Feed(WithStop({"xe", "cx"}), {0, 1, 4, 3});
  EXPECT_EQ(r.events.back().stop_reason, "cx");
  EXPECT_EQ(r.text, "ab");
}

TEST(SequenceTest, Utf8CharacterSplitAcrossTokensIsNotBroken) {
  Fed r = Feed(SamplingParams{}, {5, 6, 5});
  EXPECT_EQ(r.events[0].text, "");
  EXPECT_EQ(r.events[1].text, "\xC3\xA9");
  EXPECT_EQ(r.events[2].text, "");
  SamplingParams two;
  two.max_tokens = 2;
  Fed broken = Feed(two, {0, 5});  // ends in half a character
  EXPECT_EQ(broken.text, "ab\xEF\xBF\xBD");
}

TEST(SequenceTest, EosStopsUnlessIgnored) {
  Fed r = Feed(SamplingParams{}, {0, 7, 1}, {7});
  ASSERT_EQ(r.events.size(), 2u);
  EXPECT_EQ(r.events[1].finish_reason, FinishReason::kStop);
  EXPECT_EQ(r.events[1].stop_reason, "");
  EXPECT_EQ(r.events[1].token_ids, std::vector<int32_t>{7});
  EXPECT_EQ(r.text, "ab");
  SamplingParams ignore;
  ignore.ignore_eos = true;
  ignore.max_tokens = 3;
  Fed i = Feed(ignore, {0, 7, 1}, {7});
  ASSERT_EQ(i.events.size(), 3u);
  EXPECT_EQ(i.events[2].finish_reason, FinishReason::kLength);
  EXPECT_EQ(i.text, "abc");  // the special token's text is skipped
}

TEST(SequenceTest, StopTokenIdSetsStopReason) {
  SamplingParams p;
  p.stop_token_ids = {4};
  p.ignore_eos = true;  // stop_token_ids still apply
  Fed r = Feed(p, {0, 4, 1});
  ASSERT_EQ(r.events.size(), 2u);
  EXPECT_EQ(r.events[1].finish_reason, FinishReason::kStop);
  EXPECT_EQ(r.events[1].stop_reason, "4");
  EXPECT_EQ(r.text, "ab");
}

TEST(SequenceTest, MaxTokensAndFullContextGiveLength) {
  SamplingParams p;
  p.max_tokens = 3;
  Fed r = Feed(p, {0, 0, 0, 0});
  ASSERT_EQ(r.events.size(), 3u);
  EXPECT_EQ(r.events[2].finish_reason, FinishReason::kLength);
  EXPECT_EQ(r.events[2].prompt_tokens, 2);
  EXPECT_EQ(r.events[2].completion_tokens, 3);
  p.max_tokens = 100;
  Fed full = Feed(p, {0, 0, 0, 0}, {}, /*max_model_len=*/4);  // prompt 2 + 2 outputs
  ASSERT_EQ(full.events.size(), 2u);
  EXPECT_EQ(full.events[1].finish_reason, FinishReason::kLength);
}

TEST(SequenceTest, SeededRngIsReproducible) {
  GenerateRequest a, b;
  a.prompt_tokens = b.prompt_tokens = {1};
  a.params.seed = b.params.seed = 99;
  Sequence sa(1, a, [](GenerationEvent) {}, nullptr), sb(2, b, [](GenerationEvent) {}, nullptr);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(sa.rng()(), sb.rng()());
}

TEST(SequenceTest, IncludeStopStrInOutputKeepsTheStopStringAndToken) {
  SamplingParams p = WithStop({"cde"});
  p.include_stop_str_in_output = true;
  Fed r = Feed(p, {0, 1, 2, 3, 4});
  EXPECT_EQ(r.text, "abcde");
  EXPECT_EQ(r.events.back().stop_reason, "cde");
  // A stop token's own text too (a special one only when special tokens are not skipped).
  SamplingParams q;
  q.stop_token_ids = {4};
  q.include_stop_str_in_output = true;
  EXPECT_EQ(Feed(q, {0, 4, 1}).text, "abx");
  q.include_stop_str_in_output = false;
  EXPECT_EQ(Feed(q, {0, 4, 1}).text, "ab");
}

TEST(SequenceTest, MinTokensDelaysStopTokensAndStopStrings) {
  SamplingParams p = WithStop({"c"});
  p.stop_token_ids = {2};
  p.min_tokens = 3;
  // "c" (token 1) and token 2 come within the first 3 tokens: neither stops (vLLM: stop tokens
  // from min_tokens on, stop strings only after it).
  Fed r = Feed(p, {1, 2, 0, 3, 1, 4});
  ASSERT_EQ(r.events.size(), 5u);
  EXPECT_EQ(r.events.back().stop_reason, "c");
  EXPECT_EQ(r.text, "cdabe");
  p.stop = {};
  Fed t = Feed(p, {2, 0, 0, 2, 4});
  ASSERT_EQ(t.events.size(), 4u);  // the second 2 (4th token) stops
  EXPECT_EQ(t.events.back().stop_reason, "2");
}

TEST(SequenceTest, SkipSpecialTokensFalseKeepsThemInText) {
  SamplingParams p;
  p.skip_special_tokens = false;
  EXPECT_EQ(Feed(p, {0, 7, 1}).text, "ab</s>c");
  p.skip_special_tokens = true;
  EXPECT_EQ(Feed(p, {0, 7, 1}).text, "abc");
}

}  // namespace
}  // namespace mxserve
