// The structured-output request fields: each spelling compiles to the grammar it names, a
// schema keyword or regex construct the engine cannot do is a 400 naming it, and two
// constraints at once are refused.
#include "coordinator/frontends/structured_output_fields.h"

#include <string>

#include "coordinator/frontends/api_error.h"
#include "coordinator/grammar/grammar_matcher.h"
#include "gtest/gtest.h"

namespace mxserve::frontends {
namespace {

using json = nlohmann::json;

bool Accepts(const std::shared_ptr<grammar::CompiledGrammar>& g, const std::string& text) {
  grammar::GrammarMatcher m(g);
  return m.Accept(text) && m.accepting();
}

TEST(StructuredOutputFieldsTest, EachSpellingCompilesItsGrammar) {
  const json schema = json::parse(
      R"({"type":"object","properties":{"n":{"type":"integer"}},"required":["n"],
          "additionalProperties":false})");
  struct Case {
    json body;
    std::string good, bad;
  };
  const Case cases[] = {
      {{{"response_format", {{"type", "json_object"}}}}, R"({"x": [1]})", "[1]"},
      {{{"response_format",
         {{"type", "json_schema"},
          {"json_schema", {{"name", "n"}, {"schema", schema}, {"strict", true}}}}}},
       R"({"n":3})", R"({"m":3})"},
      {{{"guided_json", schema}}, R"({"n": -4})", R"({"n":"4"})"},
      {{{"guided_json", schema.dump()}}, R"({"n":0})", "{}"},
      {{{"structured_outputs", {{"json", schema}}}}, R"({"n":0})", R"({"n":0.5})"},
      {{{"guided_regex", "[0-9]{3}"}}, "123", "12"},
      {{{"structured_outputs", {{"regex", "ab+"}}}}, "abbb", "a"},
      {{{"guided_choice", {"yes", "no"}}}, "no", "maybe"},
      {{{"structured_outputs", {{"choice", {"x"}}}}}, "x", "y"},
      {{{"structured_outputs", {{"json_object", true}}}}, "{}", "1"},
  };
  for (const Case& c : cases) {
    auto g = ReadStructuredOutput(c.body);
    ASSERT_TRUE(g.ok()) << c.body << ": " << g.status();
    ASSERT_NE(*g, nullptr) << c.body;
    EXPECT_TRUE(Accepts(*g, c.good)) << c.body << " on " << c.good;
    EXPECT_FALSE(Accepts(*g, c.bad)) << c.body << " on " << c.bad;
  }
  for (const json& free : {json::object(), json{{"response_format", {{"type", "text"}}}}}) {
    auto g = ReadStructuredOutput(free);
    ASSERT_TRUE(g.ok());
    EXPECT_EQ(*g, nullptr);
  }
}

TEST(StructuredOutputFieldsTest, RefusalsNameTheFieldAndTheKeyword) {
  struct Case {
    json body;
    std::string param, mentions;
  };
  const Case cases[] = {
      {{{"response_format",
         {{"type", "json_schema"},
          {"json_schema",
           {{"name", "x"},
            {"schema", {{"type", "object"}, {"properties", {{"s", {{"type", "string"}, {"minLength", 2}}}}}}}}}}}},
       "response_format.json_schema.schema", "'minLength'"},
      {{{"guided_json", {{"type", "string"}, {"format", "email"}}}}, "guided_json", "'format'"},
      {{{"guided_regex", "(a)\\1"}}, "guided_regex", "backreference"},
      {{{"response_format", {{"type", "json_schema"}}}}, "response_format.json_schema", "object"},
      {{{"response_format", {{"type", "xml"}}}}, "response_format", "json_schema"},
      {{{"guided_choice", json::array()}}, "guided_choice", "non-empty"},
      {{{"guided_grammar", "root ::= \"a\""}}, "guided_grammar", "not supported"},
      {{{"structured_outputs", {{"grammar", "x"}}}}, "structured_outputs.grammar", "not supported"},
      {{{"guided_regex", "a"}, {"guided_choice", {"a"}}}, "guided_choice", "only one"},
      {{{"response_format", {{"type", "json_object"}}}, {"guided_regex", "a"}}, "guided_regex",
       "only one"},
  };
  for (const Case& c : cases) {
    auto g = ReadStructuredOutput(c.body);
    ASSERT_FALSE(g.ok()) << c.body;
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(ParamOf(g.status()).value_or(""), c.param) << g.status();
    EXPECT_NE(g.status().message().find(c.mentions), std::string::npos) << g.status();
  }
}

}  // namespace
}  // namespace mxserve::frontends
