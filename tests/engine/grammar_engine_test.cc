// Structured output through the engine: with a fake runner whose logits ignore the grammar,
// every output that finishes by stopping is a complete sentence of the grammar, greedy (also
// when the runner answers greedy steps with argmax ids) or sampled, and EOS comes only once
// the grammar is complete.
#include <map>
#include <string>
#include <vector>

#include "coordinator/engine/engine.h"
#include "coordinator/grammar/structured_output.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/engine/fakes.h"

namespace mxserve {
namespace {

using testing::FakeRunner;
using testing::FakeTokenizer;

// JSON-ish pieces, then filler; the last id is a special EOS.
std::vector<std::string> Pieces(int vocab) {
  std::vector<std::string> p = {"{", "}", "\"", ":", ",", " ", "[", "]", "{\"", "\":",
                                "\",", "\"}", "name", "age", "tags", "1", "0", "7", "-",
                                "a", "b", "ok", " \"", "}}", "true", "null", "<eos>"};
  while (static_cast<int>(p.size()) < vocab - 1) p.push_back(std::string(1, 'c' + p.size() % 20));
  p.push_back("<eos>");
  return p;
}

struct Result {
  std::string text;
  std::vector<int32_t> tokens;
  FinishReason reason = FinishReason::kNone;
};

TEST(GrammarEngineTest, ConstrainedOutputsAreCompleteSentences) {
  constexpr int kVocab = 64;
  const int32_t eos = kVocab - 1;
  FakeTokenizer tok(Pieces(kVocab), {eos});
  for (bool argmax_answers : {false, true}) {
    FakeRunner runner(kVocab, 4, 256, 512);
    runner.AnswerArgmax(argmax_answers);
    EngineOptions o;
    o.scheduler.max_num_batched_tokens = 64;
    o.scheduler.max_num_seqs = 8;
    o.start_loop = false;
    auto engine = Engine::Create(o, &runner, &tok, {eos});
    ASSERT_TRUE(engine.ok()) << engine.status();

    grammar::StructuredOutputSpec spec;
    spec.kind = grammar::StructuredOutputSpec::Kind::kJsonSchema;
    spec.schema = nlohmann::json::parse(
        R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},
            "tags":{"type":"array","items":{"enum":["a","b"]}}},
            "required":["name","age","tags"],"additionalProperties":false})");
    auto g = grammar::CompileStructuredOutput(spec);
    ASSERT_TRUE(g.ok());
    std::map<std::string, Result> results;
    for (int i = 0; i < 12; ++i) {
      GenerateRequest r;
      r.request_id = "r" + std::to_string(i);
      r.prompt_tokens = {static_cast<int32_t>(20 + i), 3, 5};
      r.params.max_tokens = 300;
      r.params.temperature = i % 3 == 0 ? 0.0f : 1.0f;
      r.params.seed = i;
      r.params.grammar = *g;
      Result* res = &results[r.request_id];
      ASSERT_TRUE((*engine)
                      ->Submit(std::move(r),
                               [res](GenerationEvent ev) {
                                 res->text += ev.text;
                                 res->tokens.insert(res->tokens.end(), ev.token_ids.begin(),
                                                    ev.token_ids.end());
                                 if (ev.finished) res->reason = ev.finish_reason;
                               })
                      .ok());
    }
    for (int s = 0; s < 5000 && (*engine)->Step(); ++s) {
    }
    int stopped = 0;
    for (const auto& [id, res] : results) {
      ASSERT_NE(res.reason, FinishReason::kNone) << id;
      ASSERT_NE(res.reason, FinishReason::kError) << id;
      // Whatever the output, it is a prefix of the language; finished by stopping, complete.
      grammar::GrammarMatcher m(*g);
      ASSERT_TRUE(m.Accept(res.text)) << id << ": " << res.text;
      if (res.reason != FinishReason::kStop) continue;
      ++stopped;
      EXPECT_TRUE(m.accepting()) << id << ": " << res.text;
      const auto j = nlohmann::json::parse(res.text, nullptr, /*allow_exceptions=*/false);
      ASSERT_FALSE(j.is_discarded()) << res.text;
      EXPECT_TRUE(j["name"].is_string() && j["age"].is_number_integer() && j["tags"].is_array())
          << res.text;
      // EOS, if sampled, is last; no other special token appears.
      for (size_t k = 0; k + 1 < res.tokens.size(); ++k) EXPECT_NE(res.tokens[k], eos);
    }
    EXPECT_GT(stopped, 0) << "argmax_answers " << argmax_answers;
    (*engine)->Shutdown();
  }
}

TEST(GrammarEngineTest, ChoiceEndsWhenNothingMayFollow) {
  constexpr int kVocab = 64;
  const int32_t eos = kVocab - 1;
  FakeTokenizer tok(Pieces(kVocab), {eos});
  FakeRunner runner(kVocab, 4, 64, 256);
  EngineOptions o;
  o.scheduler.max_num_batched_tokens = 64;
  o.scheduler.max_num_seqs = 4;
  o.start_loop = false;
  auto engine = Engine::Create(o, &runner, &tok, {eos});
  ASSERT_TRUE(engine.ok());
  grammar::StructuredOutputSpec spec;
  spec.kind = grammar::StructuredOutputSpec::Kind::kChoice;
  spec.choices = {"true", "null"};
  auto g = grammar::CompileStructuredOutput(spec);
  ASSERT_TRUE(g.ok());
  for (int i = 0; i < 6; ++i) {
    GenerateRequest r;
    r.request_id = "c" + std::to_string(i);
    r.prompt_tokens = {static_cast<int32_t>(i + 1)};
    r.params.max_tokens = 50;
    r.params.temperature = 1.0f;
    r.params.seed = i;
    r.params.grammar = *g;
    Result res;
    ASSERT_TRUE((*engine)->Submit(std::move(r), [&res](GenerationEvent ev) {
      res.text += ev.text;
      if (ev.finished) res.reason = ev.finish_reason;
    }).ok());
    for (int s = 0; s < 200 && (*engine)->Step(); ++s) {
    }
    EXPECT_EQ(res.reason, FinishReason::kStop);
    EXPECT_TRUE(res.text == "true" || res.text == "null") << res.text;
  }
}

TEST(GrammarEngineTest, GrammarWithoutTokenizerIsRefused) {
  FakeRunner runner(64, 4, 64, 256);
  EngineOptions o;
  o.start_loop = false;
  o.scheduler.max_num_batched_tokens = 64;
  o.scheduler.max_num_seqs = 4;
  auto engine = Engine::Create(o, &runner, nullptr, {});
  ASSERT_TRUE(engine.ok());
  grammar::StructuredOutputSpec spec;
  GenerateRequest r;
  r.prompt_tokens = {1};
  r.params.grammar = *grammar::CompileStructuredOutput(spec);
  EXPECT_EQ((*engine)->Submit(r, [](GenerationEvent) {}).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace mxserve
