// Request validation without a server: the UTF-8 check against a slow twin written from the
// Unicode well-formed byte table, and the context-length boundary.
#include "coordinator/frontends/openai_api.h"

#include <random>
#include <set>

#include <gtest/gtest.h>

#include "coordinator/frontends/api_error.h"
#include "coordinator/frontends/grpc_generate.h"
#include "core/bounded_json.h"
#include "tests/frontends/fakes.h"

namespace mxserve::frontends {
namespace {

using ::mxserve::testing::FakeChatTemplate;
using ::mxserve::testing::FakeGenerationService;
using ::mxserve::testing::FakeTokenizer;

// Unicode 15, Table 3-7 "Well-Formed UTF-8 Byte Sequences", row by row.
bool SlowValidUtf8(const std::string& s) {
  struct Row {
    int lo[4], hi[4], n;
  };
  static const Row kRows[] = {
      {{0x00}, {0x7F}, 1},
      {{0xC2, 0x80}, {0xDF, 0xBF}, 2},
      {{0xE0, 0xA0, 0x80}, {0xE0, 0xBF, 0xBF}, 3},
      {{0xE1, 0x80, 0x80}, {0xEC, 0xBF, 0xBF}, 3},
      {{0xED, 0x80, 0x80}, {0xED, 0x9F, 0xBF}, 3},
      {{0xEE, 0x80, 0x80}, {0xEF, 0xBF, 0xBF}, 3},
      {{0xF0, 0x90, 0x80, 0x80}, {0xF0, 0xBF, 0xBF, 0xBF}, 4},
      {{0xF1, 0x80, 0x80, 0x80}, {0xF3, 0xBF, 0xBF, 0xBF}, 4},
      {{0xF4, 0x80, 0x80, 0x80}, {0xF4, 0x8F, 0xBF, 0xBF}, 4},
  };
  size_t i = 0;
  while (i < s.size()) {
    bool ok = false;
    for (const Row& r : kRows) {
      if (i + r.n > s.size()) continue;
      bool match = true;
      for (int k = 0; k < r.n; ++k) {
        int b = static_cast<unsigned char>(s[i + k]);
        if (b < r.lo[k] || b > r.hi[k]) match = false;
      }
      if (match) {
        i += r.n;
        ok = true;
        break;
      }
    }
    if (!ok) return false;
  }
  return true;
}

TEST(IsValidUtf8, MatchesTheUnicodeTableOnRandomInputs) {
  std::mt19937 rng(1234);
  // Bytes near every boundary of the table, plus plain ASCII.
  const std::vector<int> interesting = {0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF,
                                        0xC0, 0xC1, 0xC2, 0xDF, 0xE0, 0xE1, 0xEC, 0xED, 0xEE,
                                        0xEF, 0xF0, 0xF1, 0xF3, 0xF4, 0xF5, 0xF8, 0xFF};
  int valid = 0;
  for (int iter = 0; iter < 200000; ++iter) {
    std::string s;
    const int len = rng() % 7;
    for (int k = 0; k < len; ++k) {
      s += static_cast<char>(rng() % 4 == 0 ? rng() % 256 : interesting[rng() % interesting.size()]);
    }
    const bool want = SlowValidUtf8(s);
    valid += want;
    ASSERT_EQ(IsValidUtf8(s), want) << "input bytes: " << ::testing::PrintToString(s);
  }
  EXPECT_GT(valid, 1000);  // both outcomes were exercised
  // Every code point, encoded, is valid unless it is a surrogate.
  for (uint32_t cp = 0; cp <= 0x10FFFF; cp += (cp < 0x11000 ? 1 : 97)) {
    std::string s;
    if (cp < 0x80) {
      s = std::string(1, static_cast<char>(cp));
    } else if (cp < 0x800) {
      s = {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
    } else if (cp < 0x10000) {
      s = {static_cast<char>(0xE0 | (cp >> 12)), static_cast<char>(0x80 | ((cp >> 6) & 0x3F)),
           static_cast<char>(0x80 | (cp & 0x3F))};
    } else {
      s = {static_cast<char>(0xF0 | (cp >> 18)), static_cast<char>(0x80 | ((cp >> 12) & 0x3F)),
           static_cast<char>(0x80 | ((cp >> 6) & 0x3F)), static_cast<char>(0x80 | (cp & 0x3F))};
    }
    ASSERT_EQ(IsValidUtf8(s), !(cp >= 0xD800 && cp <= 0xDFFF)) << cp;
  }
  size_t bad = 0;
  EXPECT_FALSE(IsValidUtf8("ab\xc3", &bad));
  EXPECT_EQ(bad, 2u);
}

class ValidationTest : public ::testing::Test {
 protected:
  ServingContext Ctx() { return ServingContext{"m", 64, &tok_, &tmpl_, &engine_, {}}; }
  FakeTokenizer tok_;
  FakeChatTemplate tmpl_;
  FakeGenerationService engine_;
};

TEST_F(ValidationTest, MaxTokensAtTheContextBoundary) {
  ServingContext ctx = Ctx();
  ctx.max_model_len = 10;
  SamplingFields f;
  auto p = ResolveSampling(f, 4, ctx, "prompt");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->max_tokens, 6);  // the rest of the context
  f.max_tokens = 6;
  EXPECT_TRUE(ResolveSampling(f, 4, ctx, "prompt").ok());
  f.max_tokens = 7;
  absl::Status s = ResolveSampling(f, 4, ctx, "prompt").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ParamOf(s), "max_tokens");
  EXPECT_EQ(CodeOf(s), "context_length_exceeded");
  f.max_tokens.reset();
  s = ResolveSampling(f, 10, ctx, "messages").status();
  EXPECT_EQ(ParamOf(s), "messages");
  f.param_prefix = "sampling.";
  f.temperature = 9;
  EXPECT_EQ(ParamOf(ResolveSampling(f, 1, ctx, "prompt").status()), "sampling.temperature");
}

TEST_F(ValidationTest, ChatRequestParsesIntoTheEngineRequest) {
  ServingContext ctx = Ctx();
  auto r = ParseChatCompletionRequest(
      R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 1.0, "stop": "q",
          "stream": true, "stream_options": {"include_usage": true}, "logprobs": true})",
      ctx);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->generate.prompt_tokens, tok_.Encode("user:x\nassistant:", true));
  EXPECT_EQ(r->generate.params.max_tokens, 1);
  EXPECT_EQ(r->generate.params.stop, std::vector<std::string>{"q"});
  EXPECT_EQ(r->generate.params.logprobs, 0);
  EXPECT_TRUE(r->stream);
  EXPECT_TRUE(r->include_usage);
  EXPECT_TRUE(r->logprobs);
}

// Every sampling field reaches the engine's SamplingParams, from HTTP and from gRPC alike.
TEST_F(ValidationTest, SamplingFieldsReachTheEngineFromBothDoors) {
  ServingContext ctx = Ctx();
  auto r = ParseCompletionRequest(
      R"({"prompt": "x", "max_tokens": 8, "presence_penalty": 0.5, "frequency_penalty": -1,
          "repetition_penalty": 1.2, "min_p": 0.1, "min_tokens": 2, "logit_bias": {"3": -100},
          "bad_words": ["no"], "skip_special_tokens": false, "include_stop_str_in_output": true})",
      ctx);
  ASSERT_TRUE(r.ok()) << r.status();
  v1::GenerateRequest req;
  req.set_prompt("x");
  v1::SamplingParams* sp = req.mutable_sampling();
  sp->set_max_tokens(8);
  sp->set_presence_penalty(0.5f);
  sp->set_frequency_penalty(-1);
  sp->set_repetition_penalty(1.2f);
  sp->set_min_p(0.1f);
  sp->set_min_tokens(2);
  (*sp->mutable_logit_bias())[3] = -100;
  sp->add_bad_words("no");
  sp->set_skip_special_tokens(false);
  sp->set_include_stop_str_in_output(true);
  auto g = ParseGenerate(req, ctx);
  ASSERT_TRUE(g.ok()) << g.status();
  for (const SamplingParams* p : {&r->generate.params, &g->generate.params}) {
    EXPECT_FLOAT_EQ(p->presence_penalty, 0.5f);
    EXPECT_FLOAT_EQ(p->frequency_penalty, -1.0f);
    EXPECT_FLOAT_EQ(p->repetition_penalty, 1.2f);
    EXPECT_FLOAT_EQ(p->min_p, 0.1f);
    EXPECT_EQ(p->min_tokens, 2);
    ASSERT_EQ(p->logit_bias.size(), 1u);
    EXPECT_EQ(p->logit_bias[0].first, 3);
    EXPECT_FLOAT_EQ(p->logit_bias[0].second, -100.0f);
    EXPECT_EQ(p->bad_words, std::vector<std::string>{"no"});
    EXPECT_FALSE(p->skip_special_tokens);
    EXPECT_TRUE(p->include_stop_str_in_output);
  }
  sp->set_repetition_penalty(0);
  EXPECT_EQ(ParamOf(ParseGenerate(req, ctx).status()), "sampling.repetition_penalty");
}

// Deep nesting anywhere a client puts JSON: refused with 400 json_too_deep naming the limit and
// where, for every route and depth, before anything recursive (the template's dumps) sees it.
// Depths of 50,000 overflowed the stack before the bound; none of these needs a big stack.
std::string Deep(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

TEST_F(ValidationTest, DeepJsonIsRefusedInEveryFieldAndRoute) {
  ServingContext ctx = Ctx();
  const std::string msgs = R"("messages": [{"role": "user", "content": "x"}])";
  struct Case { std::string body; std::string where; };
  for (int depth : {kMaxClientJsonDepth, 1000, 50000}) {
    const std::string d = Deep(depth);
    const std::vector<Case> chat = {
        {"{" + msgs + R"(, "tools": [{"type": "function", "function": {"name": "f", "parameters": )" + d + "}}]}",
         "tools[0].function.parameters"},
        {R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": )" + d + "}}]}]}",
         "messages[1].tool_calls[0].function.arguments"},
        {R"({"messages": [{"role": "user", "content": )" + d + "}]}", "messages[0].content"},
        {"{" + msgs + R"(, "stop": )" + d + "}", "stop"},
        {"{" + msgs + R"(, "unknown_extension": )" + d + "}", "unknown_extension"},
        {"{" + msgs + R"(, "response_format": {"type": "text", "schema": )" + d + "}}",
         "response_format.schema"},
    };
    for (const Case& c : chat) {
      absl::Status s = ParseChatCompletionRequest(c.body, ctx).status();
      ASSERT_FALSE(s.ok()) << c.where << " depth " << depth;
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
      EXPECT_EQ(CodeOf(s), "json_too_deep") << c.where << ": " << s;
      EXPECT_NE(s.message().find("deeper than 64 levels"), std::string::npos) << s;
      EXPECT_EQ(ParamOf(s)->rfind(c.where, 0), 0u) << *ParamOf(s);
    }
    for (auto parse : {+[](absl::string_view b, const ServingContext& c) {
                         return ParseCompletionRequest(b, c).status(); },
                       +[](absl::string_view b, const ServingContext& c) {
                         return ParseTokenizeRequest(b, c).status(); },
                       +[](absl::string_view b, const ServingContext& c) {
                         return ParseDetokenizeRequest(b, c).status(); }}) {
      absl::Status s = parse(R"({"prompt": "x", "tokens": [1], "logit_bias": )" + d + "}", ctx);
      EXPECT_EQ(CodeOf(s), "json_too_deep") << s;
      EXPECT_EQ(ParamOf(s)->rfind("logit_bias", 0), 0u);
    }
  }
  // One level less than the limit everywhere: accepted by the parser (64 levels in all).
  const std::string ok_tools = "{" + msgs + R"(, "tools": [{"type": "function", "function": {"name": "f", "parameters": )" +
                               Deep(kMaxClientJsonDepth - 5) + "}}]}";
  EXPECT_TRUE(ParseChatCompletionRequest(ok_tools, ctx).ok());
}

TEST_F(ValidationTest, DeepToolsJsonOverGrpcIsInvalidArgument) {
  ServingContext ctx = Ctx();
  for (int depth : {kMaxClientJsonDepth + 1, 50000}) {
    v1::GenerateRequest req;
    auto* m = req.mutable_messages()->add_messages();
    m->set_role("user");
    m->set_content("x");
    req.set_tools_json(R"([{"type": "function", "function": {"name": "f", "parameters": )" +
                       Deep(depth) + "}}]");
    absl::Status s = ParseGenerate(req, ctx).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(ParamOf(s), "tools_json");
    EXPECT_EQ(CodeOf(s), "json_too_deep");
    EXPECT_NE(s.message().find("deeper than 64 levels"), std::string::npos) << s;
  }
}

TEST_F(ValidationTest, DuplicateKeysAreRefusedNamingTheKey) {
  ServingContext ctx = Ctx();
  struct Case { const char* body; const char* param; };
  for (const Case& c :
       {Case{R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 1, "max_tokens": 9})",
             "max_tokens"},
        Case{R"({"messages": [{"role": "user", "content": "x", "role": "system"}]})", "messages[0].role"},
        Case{R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function",
             "function": {"name": "a", "parameters": {"type": "object", "type": "string"}}}]})",
             "tools[0].function.parameters.type"},
        Case{R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "model": "other"})",
             "model"}}) {
    absl::Status s = ParseChatCompletionRequest(c.body, ctx).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.body;
    EXPECT_EQ(CodeOf(s), "duplicate_key") << s;
    EXPECT_EQ(ParamOf(s), c.param) << s;
    EXPECT_NE(s.message().find("duplicate key"), std::string::npos) << s;
  }
  EXPECT_EQ(CodeOf(ParseCompletionRequest(R"({"prompt": "a", "prompt": "b"})", ctx).status()),
            "duplicate_key");
  EXPECT_EQ(CodeOf(ParseDetokenizeRequest(R"({"tokens": [1], "tokens": [2]})", ctx).status()),
            "duplicate_key");
  v1::GenerateRequest req;
  auto* m = req.mutable_messages()->add_messages();
  m->set_role("user");
  m->set_content("x");
  req.set_tools_json(R"([{"type": "function", "type": "function", "function": {"name": "f"}}])");
  absl::Status s = ParseGenerate(req, ctx).status();
  EXPECT_EQ(ParamOf(s), "tools_json");
  EXPECT_EQ(CodeOf(s), "duplicate_key");
}

TEST(NewRequestId, PrefixedHexAndUnique) {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    std::string id = NewRequestId("cmpl");
    ASSERT_EQ(id.size(), 5u + 32u);
    ASSERT_EQ(id.rfind("cmpl-", 0), 0u);
    ASSERT_EQ(id.find_first_not_of("0123456789abcdef", 5), std::string::npos);
    seen.insert(id);
  }
  EXPECT_EQ(seen.size(), 1000u);
}

}  // namespace
}  // namespace mxserve::frontends
