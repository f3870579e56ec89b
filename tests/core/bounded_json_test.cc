// ParseBoundedJson: the depth bound and duplicate-key refusal, for both value types, and the
// same values as nlohmann's own parser on random documents within the bounds.
#include "core/bounded_json.h"

#include <random>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mxserve {
namespace {

using ::testing::HasSubstr;
using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

std::string Nested(int depth, char open = '[', char close = ']') {
  return std::string(depth, open) + std::string(depth, close);
}

TEST(BoundedJsonTest, DepthAtTheLimitParsesOneMoreIsRefusedNamingTheLimit) {
  EXPECT_TRUE(ParseBoundedJson(Nested(kMaxClientJsonDepth)).ok());
  auto deep = ParseBoundedJson(Nested(kMaxClientJsonDepth + 1));
  ASSERT_FALSE(deep.ok());
  EXPECT_EQ(deep.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(deep.status().message(), HasSubstr("deeper than 64 levels"));
}

TEST(BoundedJsonTest, HugeDepthsAreRefusedWithoutRecursion) {
  // 1,000,000 levels: the builder never recurses and stops at level 65, so this neither
  // overflows the stack nor allocates a million containers.
  for (int depth : {65, 1000, 50000, 1000000}) {
    for (auto [open, close] : {std::pair{'[', ']'}, std::pair{'{', '}'}}) {
      std::string text;
      if (open == '[') {
        text = Nested(depth);
      } else {
        for (int i = 0; i < depth; ++i) text += "{\"a\":";
        text += "1" + std::string(depth, '}');
      }
      BoundedJsonError err;
      auto v = ParseBoundedJson<ojson>(text, {}, &err);
      ASSERT_FALSE(v.ok()) << depth;
      EXPECT_EQ(err.kind, BoundedJsonError::Kind::kTooDeep);
    }
  }
}

TEST(BoundedJsonTest, TooDeepNamesWhereItHappened) {
  std::string text = R"({"model":"m","tools":[{"type":"function","function":{"parameters":)";
  text += std::string(100, '[') + std::string(100, ']') + "}}]}";
  BoundedJsonError err;
  auto v = ParseBoundedJson(text, {}, &err);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(err.kind, BoundedJsonError::Kind::kTooDeep);
  EXPECT_EQ(err.path, "tools[0].function.parameters[0][0][0][0]...");
  EXPECT_THAT(v.status().message(), HasSubstr("tools[0].function.parameters"));
}

TEST(BoundedJsonTest, OtherLimitsAreHonoured) {
  EXPECT_TRUE(ParseBoundedJson(Nested(3), {.max_depth = 3}).ok());
  EXPECT_FALSE(ParseBoundedJson(Nested(4), {.max_depth = 3}).ok());
  EXPECT_TRUE(ParseBoundedJson("7", {.max_depth = 0}).ok());  // scalars have no depth
  EXPECT_FALSE(ParseBoundedJson("[]", {.max_depth = 0}).ok());
}

TEST(BoundedJsonTest, DuplicateKeysAreRefusedNamingTheKeyAtEveryLevel) {
  struct Case { const char* text; const char* path; };
  for (const Case& c : {Case{R"({"model":"a","model":"b"})", "model"},
                        Case{R"({"messages":[{"role":"user","content":"x","role":"tool"}]})",
                             "messages[0].role"},
                        Case{R"([1,{"a":{"b":1,"c":2,"b":3}}])", "[1].a.b"},
                        Case{R"({"x":{"":1,"":2}})", "x."}}) {
    for (bool ordered : {false, true}) {
      BoundedJsonError err;
      absl::Status s = ordered ? ParseBoundedJson<ojson>(c.text, {}, &err).status()
                               : ParseBoundedJson<json>(c.text, {}, &err).status();
      ASSERT_FALSE(s.ok()) << c.text;
      EXPECT_EQ(err.kind, BoundedJsonError::Kind::kDuplicateKey);
      EXPECT_EQ(err.path, c.path);
      EXPECT_THAT(s.message(), HasSubstr("duplicate key"));
    }
  }
  // The same key in sibling objects is no duplicate; escapes are compared decoded.
  EXPECT_TRUE(ParseBoundedJson(R"([{"a":1},{"a":2}])").ok());
  EXPECT_FALSE(ParseBoundedJson(R"({"a":1,"\u0061":2})").ok());
  EXPECT_TRUE(ParseBoundedJson(R"({"a":1,"a":2})", {.refuse_duplicate_keys = false}).ok());
}

TEST(BoundedJsonTest, SyntaxErrorsKeepTheParserMessage) {
  for (const char* bad : {"", "{", "[1,]", "{\"a\" 1}", "nul", "[1] x", "\"\\x\""}) {
    BoundedJsonError err;
    auto v = ParseBoundedJson(bad, {}, &err);
    ASSERT_FALSE(v.ok()) << bad;
    EXPECT_EQ(err.kind, BoundedJsonError::Kind::kSyntax);
    EXPECT_THAT(v.status().message(), HasSubstr("not valid JSON"));
  }
}

// Random documents within the bounds (unique keys, depth <= 8): the same value as
// nlohmann::json::parse gives, key order kept for ordered_json.
std::string RandomValue(std::mt19937& rng, int depth) {
  std::uniform_int_distribution<int> kind(0, depth >= 8 ? 4 : 6);
  switch (kind(rng)) {
    case 0: return "null";
    case 1: return rng() % 2 ? "true" : "false";
    case 2: return std::to_string(static_cast<int64_t>(rng()) - (1ll << 31));
    case 3: return std::to_string((rng() % 100000) / 7.0);
    case 4: return "\"s" + std::to_string(rng() % 1000) + "\\n\\u00e9\"";
    case 5: {
      std::string out = "[";
      const int n = rng() % 5;
      for (int i = 0; i < n; ++i) out += (i ? "," : "") + RandomValue(rng, depth + 1);
      return out + "]";
    }
    default: {
      std::string out = "{";
      const int n = rng() % 5;
      for (int i = 0; i < n; ++i) {
        out += (i ? ",\"k" : "\"k") + std::to_string(n - i) + "\":" + RandomValue(rng, depth + 1);
      }
      return out + "}";
    }
  }
}

TEST(BoundedJsonTest, SameValuesAsNlohmannOnRandomDocuments) {
  std::mt19937 rng(20261206);
  for (int i = 0; i < 2000; ++i) {
    const std::string text = RandomValue(rng, 0);
    auto a = ParseBoundedJson<json>(text);
    ASSERT_TRUE(a.ok()) << text << ": " << a.status();
    EXPECT_EQ(*a, json::parse(text)) << text;
    auto b = ParseBoundedJson<ojson>(text);
    ASSERT_TRUE(b.ok()) << text;
    EXPECT_EQ(b->dump(), ojson::parse(text).dump()) << text;
  }
}

TEST(BoundedJsonTest, WideObjectsStayLinearForOrderedJson) {
  // 200,000 keys in one object: ordered_map's own insert would compare each new key with all
  // earlier ones (2e10 comparisons); the builder's key set keeps this to one pass.
  std::string text = "{";
  for (int i = 0; i < 200000; ++i) text += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":1";
  text += "}";
  auto v = ParseBoundedJson<ojson>(text);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->size(), 200000u);
  EXPECT_EQ(v->begin().key(), "k0");
}

}  // namespace
}  // namespace mxserve
