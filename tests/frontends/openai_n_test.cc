// n > 1 choices, seeds per choice, chat logprobs, return_tokens_as_token_ids and tool_choice
// validation on the HTTP front door (real sockets on 127.0.0.1, fake engine/tokenizer).
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "coordinator/frontends/http_frontend.h"
#include "coordinator/frontends/openai_api.h"
#include "nlohmann/json.hpp"
#include "tests/frontends/fakes.h"
#include "tests/frontends/http_client.h"
#include "tests/frontends/http_fixture.h"

namespace mxserve::frontends {
namespace {

using json = nlohmann::json;
using ::mxserve::testing::HttpResult;
using ::mxserve::testing::SseEvents;

class OpenAiChoicesTest : public ::mxserve::testing::HttpFrontendFixture {
 protected:
  // The SSE payloads of a stream, checked for framing and a single trailing [DONE].
  std::vector<json> Stream(const HttpResult& r) {
    std::string err;
    std::vector<std::string> events = SseEvents(r.body, &err);
    EXPECT_TRUE(err.empty()) << err;
    std::vector<json> out;
    int done = 0;
    for (const std::string& e : events) {
      if (e == "[DONE]") {
        ++done;
        continue;
      }
      EXPECT_EQ(done, 0) << "payload after [DONE]";
      out.push_back(json::parse(e));
    }
    EXPECT_EQ(done, 1);
    return out;
  }
};

TEST(ChoiceRequests, SuffixesIdsAndDerivesSeeds) {
  GenerateRequest g;
  g.request_id = "cmpl-x";
  g.prompt_tokens = {1, 2};
  g.params.seed = 41;
  auto one = ChoiceRequests(g, 1);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].request_id, "cmpl-x");
  EXPECT_EQ(one[0].params.seed, 41u);
  auto three = ChoiceRequests(g, 3);
  ASSERT_EQ(three.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(three[i].request_id, "cmpl-x-" + std::to_string(i));
    EXPECT_EQ(three[i].params.seed, 41u + i);
    EXPECT_EQ(three[i].prompt_tokens, g.prompt_tokens);
  }
  g.params.seed.reset();
  for (const auto& r : ChoiceRequests(g, 2)) EXPECT_FALSE(r.params.seed.has_value());
}

TEST_F(OpenAiChoicesTest, ChatNGivesNChoicesAndSumsUsage) {
  HttpResult r = Post("/v1/chat/completions", Chat({{"n", 3}, {"seed", 7}}));
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  EXPECT_EQ(j["object"], "chat.completion");
  const std::string id = j["id"];
  ASSERT_EQ(j["choices"].size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(j["choices"][i]["index"], i);
    EXPECT_EQ(j["choices"][i]["message"]["content"], "Hello!");
    EXPECT_EQ(j["choices"][i]["finish_reason"], "stop");
  }
  const int prompt = static_cast<int>(std::string("user:Hi\nassistant:").size());
  EXPECT_EQ(j["usage"]["prompt_tokens"], prompt);   // counted once, as OpenAI
  EXPECT_EQ(j["usage"]["completion_tokens"], 18);   // 3 x 6
  EXPECT_EQ(j["usage"]["total_tokens"], prompt + 18);
  auto reqs = engine_.requests();
  ASSERT_EQ(reqs.size(), 3u);
  std::set<std::string> ids;
  std::set<uint64_t> seeds;
  for (const auto& q : reqs) {
    ids.insert(q.request_id);
    seeds.insert(q.params.seed.value_or(0));
  }
  EXPECT_EQ(ids, (std::set<std::string>{id + "-0", id + "-1", id + "-2"}));
  EXPECT_EQ(seeds, (std::set<uint64_t>{7, 8, 9}));
}

TEST_F(OpenAiChoicesTest, ChatNStreamsEveryChoiceWithItsIndexThenOneUsage) {
  HttpResult r = Post("/v1/chat/completions",
                      Chat({{"n", 2}, {"stream", true},
                            {"stream_options", {{"include_usage", true}}}}));
  ASSERT_EQ(r.status, 200) << r.body;
  std::vector<json> chunks = Stream(r);
  std::string text[2];
  int finishes[2] = {0, 0};
  int usage_chunks = 0;
  std::set<std::string> ids;
  for (const json& c : chunks) {
    ids.insert(c["id"].get<std::string>());
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    if (c["choices"].empty()) {
      ++usage_chunks;
      EXPECT_EQ(c["usage"]["completion_tokens"], 12);
      EXPECT_EQ(&c, &chunks.back()) << "usage is the last chunk";
      continue;
    }
    EXPECT_TRUE(c["usage"].is_null());
    const json& ch = c["choices"][0];
    const int i = ch["index"];
    ASSERT_TRUE(i == 0 || i == 1) << c;
    if (ch["delta"].contains("content")) text[i] += ch["delta"]["content"].get<std::string>();
    if (!ch["finish_reason"].is_null()) {
      ++finishes[i];
      EXPECT_EQ(ch["finish_reason"], "stop");
    }
  }
  EXPECT_EQ(ids.size(), 1u);
  EXPECT_EQ(text[0], "Hello!");
  EXPECT_EQ(text[1], "Hello!");
  EXPECT_EQ(finishes[0], 1);
  EXPECT_EQ(finishes[1], 1);
  EXPECT_EQ(usage_chunks, 1);
}

TEST_F(OpenAiChoicesTest, CompletionsNWholeAndStreamed) {
  HttpResult r = Post("/v1/completions", json{{"prompt", "Hi"}, {"n", 2}, {"max_tokens", 4}});
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  ASSERT_EQ(j["choices"].size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(j["choices"][i]["index"], i);
    EXPECT_EQ(j["choices"][i]["text"], "Hell");
    EXPECT_EQ(j["choices"][i]["finish_reason"], "length");
  }
  EXPECT_EQ(j["usage"]["prompt_tokens"], 2);
  EXPECT_EQ(j["usage"]["completion_tokens"], 8);

  r = Post("/v1/completions", json{{"prompt", "Hi"}, {"n", 2}, {"max_tokens", 4},
                                   {"stream", true}});
  ASSERT_EQ(r.status, 200) << r.body;
  std::string text[2];
  for (const json& c : Stream(r)) {
    ASSERT_EQ(c["choices"].size(), 1u);
    EXPECT_TRUE(c.find("usage") == c.end() || c["usage"].is_null());
    text[c["choices"][0]["index"].get<int>()] += c["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(text[0], "Hell");
  EXPECT_EQ(text[1], "Hell");
}

TEST_F(OpenAiChoicesTest, NAndBestOfAreChecked) {
  for (const json& bad : {json{{"n", 0}}, json{{"n", 17}}, json{{"n", "2"}}}) {
    HttpResult r = Post("/v1/chat/completions", Chat(bad));
    ASSERT_EQ(r.status, 400) << bad;
    EXPECT_EQ(json::parse(r.body)["error"]["param"], "n") << r.body;
  }
  HttpResult r = Post("/v1/completions", json{{"prompt", "Hi"}, {"n", 2}, {"best_of", 3}});
  ASSERT_EQ(r.status, 400);
  EXPECT_EQ(json::parse(r.body)["error"]["param"], "best_of");
  r = Post("/v1/completions", json{{"prompt", "Hi"}, {"n", 2}, {"best_of", 2}});
  EXPECT_EQ(r.status, 200) << r.body;
}

TEST_F(OpenAiChoicesTest, ChatLogprobsWithTopLogprobs) {
  HttpResult r = Post("/v1/chat/completions",
                      Chat({{"logprobs", true}, {"top_logprobs", 2}, {"max_tokens", 3}}));
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  const json& content = j["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 3u);
  const std::string expect = "Hel";
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(content[i]["token"], std::string(1, expect[i]));
    EXPECT_NEAR(content[i]["logprob"].get<double>(), -0.5 * (i + 1), 1e-6);
    EXPECT_EQ(content[i]["bytes"], json::array({static_cast<int>(expect[i])}));
    ASSERT_EQ(content[i]["top_logprobs"].size(), 2u);
    EXPECT_EQ(content[i]["top_logprobs"][1]["token"], "b");
  }
  EXPECT_EQ(engine_.requests().back().params.logprobs, 2);
  // Streamed: each token's logprobs ride on its delta.
  r = Post("/v1/chat/completions",
           Chat({{"logprobs", true}, {"top_logprobs", 1}, {"max_tokens", 2}, {"stream", true}}));
  ASSERT_EQ(r.status, 200) << r.body;
  int with_lp = 0;
  for (const json& c : Stream(r)) {
    const json& lp = c["choices"][0]["logprobs"];
    if (lp.is_null()) continue;
    ++with_lp;
    EXPECT_EQ(lp["content"][0]["top_logprobs"].size(), 1u);
  }
  EXPECT_EQ(with_lp, 2);
}

TEST_F(OpenAiChoicesTest, TokensAsTokenIds) {
  HttpResult r = Post("/v1/completions", json{{"prompt", "Hi"}, {"max_tokens", 2},
                                              {"logprobs", 1}, {"echo", true},
                                              {"return_tokens_as_token_ids", true}});
  ASSERT_EQ(r.status, 200) << r.body;
  json lp = json::parse(r.body)["choices"][0]["logprobs"];
  EXPECT_EQ(lp["tokens"], json::array({"token_id:72", "token_id:105", "token_id:72",
                                       "token_id:101"}));
  EXPECT_TRUE(lp["top_logprobs"][1].contains("token_id:97")) << lp;
  r = Post("/v1/chat/completions", Chat({{"logprobs", true}, {"top_logprobs", 1},
                                         {"max_tokens", 1},
                                         {"return_tokens_as_token_ids", true}}));
  ASSERT_EQ(r.status, 200) << r.body;
  json c = json::parse(r.body)["choices"][0]["logprobs"]["content"][0];
  EXPECT_EQ(c["token"], "token_id:72");
  EXPECT_EQ(c["top_logprobs"][0]["token"], "token_id:97");
}

TEST_F(OpenAiChoicesTest, ToolChoiceIsValidated) {
  const json tools = json::array({{{"type", "function"},
                                   {"function", {{"name", "get_weather"},
                                                 {"parameters", json::object()}}}}});
  struct Case {
    json choice;
    std::string message;
  };
  for (const Case& c : std::vector<Case>{
           {json{{"type", "function"}, {"function", {{"name", "nope"}}}}, "not in 'tools'"},
           {json{{"type", "function"}}, "must be"},
           {"sometimes", "must be"},
           {5, "string or an object"},
           // The fake template cannot force a call.
           {"required", "cannot force"},
           {json{{"type", "function"}, {"function", {{"name", "get_weather"}}}}, "cannot force"}}) {
    HttpResult r = Post("/v1/chat/completions", Chat({{"tools", tools}, {"tool_choice", c.choice}}));
    ASSERT_EQ(r.status, 400) << c.choice;
    json e = json::parse(r.body)["error"];
    EXPECT_EQ(e["param"], "tool_choice") << r.body;
    EXPECT_NE(e["message"].get<std::string>().find(c.message), std::string::npos) << r.body;
  }
  for (const char* ok : {"auto", "none"}) {
    HttpResult r = Post("/v1/chat/completions", Chat({{"tools", tools}, {"tool_choice", ok}}));
    EXPECT_EQ(r.status, 200) << r.body;
  }
}

}  // namespace
}  // namespace mxserve::frontends
