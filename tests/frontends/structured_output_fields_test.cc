// The structured-output request fields: each spelling compiles to the grammar it names, a
// schema keyword or regex construct the engine cannot do is a 400 naming it, and two
// constraints at once are refused.
#include "coordinator/frontends/structured_output_fields.h"

#include <string>

#include "coordinator/frontends/api_error.h"
#include "coordinator/frontends/grpc_generate.h"
#include "coordinator/frontends/openai_api.h"
#include "coordinator/grammar/grammar_matcher.h"
#include "gtest/gtest.h"
#include "tests/frontends/fakes.h"

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

class StructuredRequestTest : public ::testing::Test {
 protected:
  ServingContext Ctx() { return ServingContext{"m", 64, &tok_, &tmpl_, &engine_, {}}; }
  testing::FakeTokenizer tok_;
  testing::FakeChatTemplate tmpl_;
  testing::FakeGenerationService engine_;
};

TEST_F(StructuredRequestTest, EveryDoorCarriesTheGrammarToTheEngine) {
  const ServingContext ctx = Ctx();
  auto chat = ParseChatCompletionRequest(
      R"({"messages": [{"role": "user", "content": "x"}],
          "response_format": {"type": "json_object"}})", ctx);
  ASSERT_TRUE(chat.ok()) << chat.status();
  ASSERT_NE(chat->generate.params.grammar, nullptr);
  EXPECT_TRUE(chat->render.forced_final);  // the prompt ends in the answer's header
  EXPECT_TRUE(Accepts(chat->generate.params.grammar, "{}"));

  auto plain = ParseChatCompletionRequest(R"({"messages": [{"role": "user", "content": "x"}]})", ctx);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->generate.params.grammar, nullptr);
  EXPECT_FALSE(plain->render.forced_final);

  auto cmpl = ParseCompletionRequest(R"({"prompt": "x", "guided_choice": ["a", "b"]})", ctx);
  ASSERT_TRUE(cmpl.ok()) << cmpl.status();
  ASSERT_NE(cmpl->generate.params.grammar, nullptr);
  EXPECT_TRUE(Accepts(cmpl->generate.params.grammar, "b"));

  v1::GenerateRequest req;
  auto* m = req.mutable_messages()->add_messages();
  m->set_role("user");
  m->set_content("x");
  req.set_response_format_json(
      R"({"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "integer"}}})");
  auto gen = ParseGenerate(req, ctx);
  ASSERT_TRUE(gen.ok()) << gen.status();
  ASSERT_NE(gen->generate.params.grammar, nullptr);
  EXPECT_TRUE(gen->render.forced_final);
  EXPECT_TRUE(Accepts(gen->generate.params.grammar, "-12"));
  EXPECT_FALSE(Accepts(gen->generate.params.grammar, "1.5"));

  v1::GenerateRequest bad;
  bad.set_prompt("x");
  bad.set_response_format_json(R"({"type": "json_schema", "json_schema": {"schema": {"not": {}}}})");
  auto refused = ParseGenerate(bad, ctx);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("'not'"), std::string::npos) << refused.status();
  bad.set_response_format_json("{nope");
  EXPECT_EQ(ParamOf(ParseGenerate(bad, ctx).status()), "response_format_json");
}

}  // namespace
}  // namespace mxserve::frontends
