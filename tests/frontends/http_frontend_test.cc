// The HTTP front door over real sockets on 127.0.0.1 (port 0), against fake engine/tokenizer.
#include "coordinator/frontends/http_frontend.h"

#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "nlohmann/json.hpp"
#include "tests/frontends/fakes.h"
#include "tests/frontends/http_client.h"
#include "tests/frontends/http_fixture.h"

namespace mxserve::frontends {
namespace {

using json = nlohmann::json;
using ::mxserve::testing::FakeGenerationService;
using ::mxserve::testing::FakeTokenizer;
using ::mxserve::testing::HttpCall;
using ::mxserve::testing::HttpClient;
using ::mxserve::testing::HttpResult;
using ::mxserve::testing::WaitFor;
using ::mxserve::testing::SseEvents;

class HttpFrontendTest : public ::mxserve::testing::HttpFrontendFixture {
 protected:
  // The server still answers a good request (after a bad one).
  void ExpectStillServing() {
    HttpResult r = Post("/v1/chat/completions", Chat());
    ASSERT_EQ(r.status, 200) << r.body << r.error;
    EXPECT_EQ(json::parse(r.body)["choices"][0]["message"]["content"], "Hello!");
  }
};

TEST_F(HttpFrontendTest, ChatCompletionHasOpenAiShape) {
  HttpResult r = Post("/v1/chat/completions", Chat({{"seed", 7}, {"temperature", 0}}));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.header("content-type"), "application/json");
  json j = json::parse(r.body);
  EXPECT_TRUE(j["id"].get<std::string>().rfind("chatcmpl-", 0) == 0) << j["id"];
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_TRUE(j["created"].is_number_integer());
  EXPECT_EQ(j["model"], kModel);
  ASSERT_EQ(j["choices"].size(), 1u);
  const json& c = j["choices"][0];
  EXPECT_EQ(c["index"], 0);
  EXPECT_EQ(c["message"]["role"], "assistant");
  EXPECT_EQ(c["message"]["content"], "Hello!");
  EXPECT_TRUE(c["message"]["reasoning_content"].is_null());
  EXPECT_TRUE(c["logprobs"].is_null());
  EXPECT_EQ(c["finish_reason"], "stop");
  const std::string prompt = "user:Hi\nassistant:";
  EXPECT_EQ(j["usage"]["prompt_tokens"], static_cast<int>(prompt.size()));
  EXPECT_EQ(j["usage"]["completion_tokens"], 6);
  EXPECT_EQ(j["usage"]["total_tokens"], static_cast<int>(prompt.size()) + 6);

  // What reached the engine.
  auto reqs = engine_.requests();
  ASSERT_EQ(reqs.size(), 1u);
  EXPECT_EQ(reqs[0].request_id, j["id"]);
  EXPECT_EQ(reqs[0].prompt_tokens, tok_.Encode(prompt, true));
  EXPECT_EQ(reqs[0].params.max_tokens, kMaxLen - static_cast<int>(prompt.size()));
  EXPECT_EQ(reqs[0].params.seed, 7u);
  EXPECT_EQ(reqs[0].params.temperature, 0.0f);
  EXPECT_EQ(reqs[0].params.stop_token_ids, std::vector<int32_t>{FakeTokenizer::kEnd});
  EXPECT_EQ(reqs[0].params.logprobs, -1);
}

TEST_F(HttpFrontendTest, ChatFieldsReachTheEngine) {
  json body = Chat({{"max_completion_tokens", 5}, {"top_p", 0.5}, {"top_k", 3},
                    {"stop", json::array({"x", "yz"})}, {"reasoning_effort", "high"},
                    {"unknown_field", {{"a", 1}}}, {"user", "me"}});
  body["messages"] = json::array({{{"role", "system"}, {"content", "S"}},
                                  {{"role", "user"},
                                   {"content", json::array({{{"type", "text"}, {"text", "a"}},
                                                            {{"type", "text"}, {"text", "b"}}})}}});
  HttpResult r = Post("/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  auto req = engine_.requests().at(0);
  EXPECT_EQ(req.prompt_tokens, tok_.Encode("system:S\nuser:a\nb\nassistant:", true));
  EXPECT_EQ(req.params.max_tokens, 5);
  EXPECT_FLOAT_EQ(req.params.top_p, 0.5f);
  EXPECT_EQ(req.params.top_k, 3);
  EXPECT_EQ(req.params.stop, (std::vector<std::string>{"x", "yz"}));
  EXPECT_EQ(tmpl_.last_effort(), "high");
  // max_tokens 5 < 6 scripted tokens: cut at length.
  EXPECT_EQ(json::parse(r.body)["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(json::parse(r.body)["choices"][0]["message"]["content"], "Hello");
}

TEST_F(HttpFrontendTest, ChatReasoningGoesToReasoningContent) {
  engine_.set_script([](const GenerateRequest& req) {
    return FakeGenerationService::TextScript(
        req, {FakeTokenizer::kThink, 'h', 'm', FakeTokenizer::kAnswer, 'O', 'K', FakeTokenizer::kEnd});
  });
  HttpResult r = Post("/v1/chat/completions", Chat());
  ASSERT_EQ(r.status, 200) << r.body;
  json m = json::parse(r.body)["choices"][0]["message"];
  EXPECT_EQ(m["reasoning_content"], "hm");
  EXPECT_EQ(m["content"], "OK");

  r = Post("/v1/chat/completions", Chat({{"stream", true}}));
  ASSERT_EQ(r.status, 200);
  std::string err, reasoning, content;
  for (const std::string& e : SseEvents(r.body, &err)) {
    if (e == "[DONE]") continue;
    json d = json::parse(e)["choices"][0]["delta"];
    if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
    if (d.contains("content")) content += d["content"].get<std::string>();
  }
  EXPECT_EQ(err, "");
  EXPECT_EQ(reasoning, "hm");
  EXPECT_EQ(content, "OK");
}

TEST_F(HttpFrontendTest, ChatToolCalls) {
  engine_.set_script([](const GenerateRequest& req) {
    return FakeGenerationService::TextScript(
        req, {'o', 'k', FakeTokenizer::kCall, '{', '"', 'q', '"', ':', '1', '}'});
  });
  json tools = json::parse(
      R"([{"type": "function", "function": {"name": "lookup", "parameters": {}}}])");
  json body = Chat({{"tool_choice", "auto"}});
  body["tools"] = tools;
  body["messages"] = json::parse(R"([
      {"role": "user", "content": "find q"},
      {"role": "assistant", "content": null, "reasoning_content": "think",
       "tool_calls": [{"id": "call_1", "type": "function",
                       "function": {"name": "lookup", "arguments": "{}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "42"}])");
  HttpResult r = Post("/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(tmpl_.last_tools_json()), tools);
  const std::vector<ChatMessage> seen = tmpl_.last_messages();
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(json::parse(seen[1].tool_calls_json), body["messages"][1]["tool_calls"]);
  EXPECT_EQ(seen[1].reasoning, "think");
  EXPECT_EQ(seen[1].content, "");
  EXPECT_EQ(seen[2].content, "42");
  json c = json::parse(r.body)["choices"][0];
  EXPECT_EQ(c["finish_reason"], "tool_calls");
  EXPECT_EQ(c["message"]["content"], "ok");
  ASSERT_EQ(c["message"]["tool_calls"].size(), 1u);
  const json& call = c["message"]["tool_calls"][0];
  EXPECT_EQ(call["type"], "function");
  EXPECT_FALSE(call["id"].get<std::string>().empty());
  EXPECT_EQ(call["function"]["name"], "lookup");
  EXPECT_EQ(call["function"]["arguments"], R"({"q":1})");

  body["stream"] = true;
  r = Post("/v1/chat/completions", body);
  ASSERT_EQ(r.status, 200) << r.body;
  std::string err, args, name, id, finish;
  for (const std::string& e : SseEvents(r.body, &err)) {
    if (e == "[DONE]") continue;
    const json ch = json::parse(e)["choices"][0];
    if (!ch["finish_reason"].is_null()) finish = ch["finish_reason"];
    if (!ch["delta"].contains("tool_calls")) continue;
    for (const json& t : ch["delta"]["tool_calls"]) {
      EXPECT_EQ(t["index"], 0);
      if (t.contains("id")) {
        EXPECT_TRUE(id.empty()) << "id only on the first piece";
        id = t["id"];
        EXPECT_EQ(t["type"], "function");
      }
      if (t["function"].contains("name")) name += t["function"]["name"].get<std::string>();
      args += t["function"]["arguments"].get<std::string>();
    }
  }
  EXPECT_EQ(err, "");
  EXPECT_FALSE(id.empty());
  EXPECT_EQ(name, "lookup");
  EXPECT_EQ(args, R"({"q":1})");
  EXPECT_EQ(finish, "tool_calls");

  // tool_choice "none" offers no tools to the template.
  body["stream"] = false;
  body["tool_choice"] = "none";
  ASSERT_EQ(Post("/v1/chat/completions", body).status, 200);
  EXPECT_EQ(tmpl_.last_tools_json(), "");
}

TEST_F(HttpFrontendTest, MessageTextNeverBecomesSpecialTokens) {
  json body = Chat();
  body["messages"][0]["content"] = "<|end|><|think|>";
  ASSERT_EQ(Post("/v1/chat/completions", body).status, 200);
  const std::vector<int32_t> prompt = engine_.requests().at(0).prompt_tokens;
  EXPECT_EQ(prompt, tok_.Encode("user:<|end|><|think|>\nassistant:", /*allow_special=*/false));
  for (int32_t id : prompt) EXPECT_LT(id, 256);
}

TEST_F(HttpFrontendTest, ChatStreamingFramingChunksUsageAndDone) {
  HttpResult r = Post("/v1/chat/completions",
                      Chat({{"stream", true}, {"stream_options", {{"include_usage", true}}}}));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.header("content-type"), "text/event-stream; charset=utf-8");
  EXPECT_EQ(r.header("transfer-encoding"), "chunked");
  std::string err;
  std::vector<std::string> events = SseEvents(r.body, &err);
  ASSERT_EQ(err, "") << r.body;
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.back(), "[DONE]");
  json first = json::parse(events[0]);
  const std::string id = first["id"];
  EXPECT_TRUE(id.rfind("chatcmpl-", 0) == 0);
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  std::string content;
  int finish_chunks = 0;
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    json c = json::parse(events[i]);
    EXPECT_EQ(c["id"], id);
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    EXPECT_EQ(c["model"], kModel);
    EXPECT_TRUE(c.contains("usage") && c["usage"].is_null());
    ASSERT_EQ(c["choices"].size(), 1u);
    const json& ch = c["choices"][0];
    if (ch["delta"].contains("content")) content += ch["delta"]["content"].get<std::string>();
    if (!ch["finish_reason"].is_null()) {
      ++finish_chunks;
      EXPECT_EQ(ch["finish_reason"], "stop");
      EXPECT_EQ(i + 3, events.size()) << "finish chunk must be last before usage";
    }
  }
  EXPECT_EQ(content, "Hello!");
  EXPECT_EQ(finish_chunks, 1);
  json usage = json::parse(events[events.size() - 2]);
  EXPECT_EQ(usage["choices"].size(), 0u);
  EXPECT_EQ(usage["usage"]["completion_tokens"], 6);
  EXPECT_EQ(usage["usage"]["total_tokens"],
            usage["usage"]["prompt_tokens"].get<int>() + 6);
}

TEST_F(HttpFrontendTest, ChatLogprobs) {
  HttpResult r = Post("/v1/chat/completions", Chat({{"logprobs", true}, {"top_logprobs", 2}}));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(engine_.requests().at(0).params.logprobs, 2);
  json lp = json::parse(r.body)["choices"][0]["logprobs"];
  ASSERT_EQ(lp["content"].size(), 6u);
  const json& t0 = lp["content"][0];
  EXPECT_EQ(t0["token"], "H");
  EXPECT_FLOAT_EQ(t0["logprob"].get<float>(), -0.5f);
  EXPECT_EQ(t0["bytes"], json::array({'H'}));
  ASSERT_EQ(t0["top_logprobs"].size(), 2u);
  EXPECT_EQ(t0["top_logprobs"][1]["token"], "b");
  EXPECT_FLOAT_EQ(t0["top_logprobs"][1]["logprob"].get<float>(), -0.2f);
  EXPECT_EQ(t0["top_logprobs"][1]["bytes"], json::array({'b'}));
}

TEST_F(HttpFrontendTest, CompletionHasOpenAiShape) {
  HttpResult r = Post("/v1/completions", {{"model", kModel}, {"prompt", "abc"}, {"max_tokens", 10}});
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  EXPECT_TRUE(j["id"].get<std::string>().rfind("cmpl-", 0) == 0);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], kModel);
  EXPECT_EQ(j["choices"][0]["text"], "Hello!");
  EXPECT_EQ(j["choices"][0]["index"], 0);
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["usage"], json({{"prompt_tokens", 3}, {"completion_tokens", 6}, {"total_tokens", 9}}));
  EXPECT_EQ(engine_.requests().at(0).prompt_tokens, (std::vector<int32_t>{'a', 'b', 'c'}));
  EXPECT_EQ(engine_.requests().at(0).params.max_tokens, 10);
}

TEST_F(HttpFrontendTest, CompletionTokenIdsEchoAndPromptLogprobs) {
  HttpResult r = Post("/v1/completions", {{"prompt", {97, 98, 99}}, {"echo", true},
                                          {"logprobs", 1}, {"max_tokens", 2}});
  ASSERT_EQ(r.status, 200) << r.body;
  auto req = engine_.requests().at(0);
  EXPECT_EQ(req.params.logprobs, 1);
  EXPECT_EQ(req.params.prompt_logprobs, 1);
  json c = json::parse(r.body)["choices"][0];
  EXPECT_EQ(c["text"], "abcHe");
  EXPECT_EQ(c["finish_reason"], "length");
  const json& lp = c["logprobs"];
  EXPECT_EQ(lp["tokens"], json({"a", "b", "c", "H", "e"}));
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());
  EXPECT_TRUE(lp["top_logprobs"][0].is_null());
  EXPECT_FLOAT_EQ(lp["token_logprobs"][1].get<float>(), -1.0f);
  EXPECT_FLOAT_EQ(lp["token_logprobs"][3].get<float>(), -0.5f);
  EXPECT_FLOAT_EQ(lp["token_logprobs"][4].get<float>(), -1.0f);
  EXPECT_EQ(lp["top_logprobs"][3].size(), 1u);
  EXPECT_FLOAT_EQ(lp["top_logprobs"][3]["a"].get<float>(), -0.1f);
  EXPECT_EQ(lp["text_offset"], json({0, 1, 2, 3, 4}));
}

TEST_F(HttpFrontendTest, CompletionPromptForms) {
  HttpResult r = Post("/v1/completions", {{"prompt", json::array({"xy"})}, {"max_tokens", 1}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(engine_.requests().at(0).prompt_tokens, (std::vector<int32_t>{'x', 'y'}));
  r = Post("/v1/completions", {{"prompt", json::array({json::array({5, 6})})}, {"max_tokens", 1}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(engine_.requests().at(1).prompt_tokens, (std::vector<int32_t>{5, 6}));
  // Unset max_tokens: 16 as the legacy API and vLLM, capped by what the context leaves.
  ASSERT_EQ(Post("/v1/completions", {{"prompt", "a"}}).status, 200);
  EXPECT_EQ(engine_.requests().at(2).params.max_tokens, 16);
  ASSERT_EQ(Post("/v1/completions", {{"prompt", std::string(kMaxLen - 5, 'a')}}).status, 200);
  EXPECT_EQ(engine_.requests().at(3).params.max_tokens, 5);
}

TEST_F(HttpFrontendTest, CompletionStreaming) {
  HttpResult r = Post("/v1/completions", {{"prompt", "abc"}, {"stream", true}, {"logprobs", 0},
                                          {"stream_options", {{"include_usage", true}}}});
  ASSERT_EQ(r.status, 200) << r.body;
  std::string err;
  auto events = SseEvents(r.body, &err);
  ASSERT_EQ(err, "");
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::string text;
  std::vector<std::string> finish;
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    json c = json::parse(events[i]);
    EXPECT_EQ(c["object"], "text_completion");
    text += c["choices"][0]["text"].get<std::string>();
    if (!c["choices"][0]["finish_reason"].is_null()) finish.push_back(c["choices"][0]["finish_reason"]);
    else EXPECT_EQ(c["choices"][0]["logprobs"]["tokens"].size(), 1u);
  }
  EXPECT_EQ(text, "Hello!");
  EXPECT_EQ(finish, std::vector<std::string>{"stop"});
  json usage = json::parse(events[events.size() - 2]);
  EXPECT_EQ(usage["usage"]["prompt_tokens"], 3);
}

TEST_F(HttpFrontendTest, ModelsHealthTokenize) {
  HttpResult r = HttpCall(port_, "GET", "/v1/models");
  ASSERT_EQ(r.status, 200);
  json m = json::parse(r.body);
  EXPECT_EQ(m["object"], "list");
  ASSERT_EQ(m["data"].size(), 1u);
  EXPECT_EQ(m["data"][0]["id"], kModel);
  EXPECT_EQ(m["data"][0]["object"], "model");
  EXPECT_EQ(m["data"][0]["owned_by"], "mxserve");
  EXPECT_EQ(m["data"][0]["max_model_len"], kMaxLen);

  EXPECT_EQ(HttpCall(port_, "GET", "/health").status, 200);
  EXPECT_EQ(HttpCall(port_, "GET", "/health/ready").status, 200);
  EXPECT_EQ(HttpCall(port_, "POST", "/ping").status, 200);
  r = HttpCall(port_, "GET", "/metrics");
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "mxserve_up 1\n");
  EXPECT_EQ(r.header("content-type"), "text/plain; version=0.0.4; charset=utf-8");
  ready_ = false;
  EXPECT_EQ(HttpCall(port_, "GET", "/health").status, 200);  // liveness
  EXPECT_EQ(HttpCall(port_, "GET", "/health/ready").status, 503);
  r = Post("/v1/chat/completions", Chat());
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(json::parse(r.body)["error"]["type"], "server_error") << r.body;
  ready_ = true;

  r = Post("/tokenize", {{"model", kModel}, {"prompt", "ab<|end|>"}});
  ASSERT_EQ(r.status, 200) << r.body;
  json t = json::parse(r.body);
  EXPECT_EQ(t["tokens"], json({'a', 'b', FakeTokenizer::kEnd}));
  EXPECT_EQ(t["count"], 3);
  EXPECT_EQ(t["max_model_len"], kMaxLen);
  // As vLLM: add_special_tokens only adds the model's BOS/EOS template (the fake has none);
  // special-token text is recognized either way.
  r = Post("/tokenize", {{"prompt", "ab<|end|>"}, {"add_special_tokens", false}});
  EXPECT_EQ(json::parse(r.body)["tokens"], json({'a', 'b', FakeTokenizer::kEnd})) << r.body;
  r = Post("/tokenize", {{"messages", json::array({{{"role", "user"}, {"content", "Q"}}})}});
  EXPECT_EQ(json::parse(r.body)["count"], std::string("user:Q\nassistant:").size());
  r = Post("/detokenize", {{"tokens", {'h', 'i', FakeTokenizer::kEnd}}});
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(json::parse(r.body)["prompt"], "hi<|end|>");
  r = Post("/detokenize", {{"tokens", {1, 5000}}});
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(json::parse(r.body)["error"]["param"], "tokens");
}

struct BadCase {
  std::string name, method, path, body;
  int status;
  std::string param;   // "" = null
  std::string needle;  // in the message
};

TEST_F(HttpFrontendTest, BadInputsGetClearErrorsAndServerKeepsServing) {
  auto chat = [](json extra) { return Chat(std::move(extra)).dump(); };
  const std::string chat_path = "/v1/chat/completions", cmpl = "/v1/completions";
  std::vector<BadCase> cases = {
      {"malformed json", "POST", chat_path, "{\"model\": ", 400, "", "not valid JSON"},
      {"not an object", "POST", chat_path, "[1, 2]", 400, "", "JSON object"},
      {"invalid utf-8", "POST", chat_path,
       "{\"messages\": [{\"role\": \"user\", \"content\": \"\xff\xfe\"}]}", 400, "", "UTF-8"},
      {"messages wrong type", "POST", chat_path, R"({"messages": "hi"})", 400, "messages",
       "must be an array"},
      {"messages missing", "POST", chat_path, R"({"model": "tiny-model"})", 400, "messages",
       "required"},
      {"empty messages", "POST", chat_path, R"({"messages": []})", 400, "messages", "empty"},
      {"bad role", "POST", chat_path, R"({"messages": [{"role": "wizard", "content": "x"}]})", 400,
       "messages[0].role", "wizard"},
      {"content wrong type", "POST", chat_path, R"({"messages": [{"role": "user", "content": 5}]})",
       400, "messages[0].content", "must be a string"},
      {"image part", "POST", chat_path,
       R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})",
       400, "messages[0].content[0].type", "image_url"},
      {"unknown model", "POST", chat_path, chat({{"model", "gpt-9"}}), 404, "model", "gpt-9"},
      {"model wrong type", "POST", chat_path, chat({{"model", 3}}), 400, "model", "string"},
      {"temperature type", "POST", chat_path, chat({{"temperature", "hot"}}), 400, "temperature",
       "must be a number"},
      {"temperature range", "POST", chat_path, chat({{"temperature", 2.5}}), 400, "temperature",
       "[0, 2]"},
      {"top_p range", "POST", chat_path, chat({{"top_p", 0}}), 400, "top_p", "(0, 1]"},
      {"top_k range", "POST", chat_path, chat({{"top_k", -5}}), 400, "top_k", "top_k"},
      {"max_tokens type", "POST", chat_path, chat({{"max_tokens", "5"}}), 400, "max_tokens",
       "integer"},
      {"max_tokens fractional", "POST", chat_path, chat({{"max_tokens", 2.5}}), 400, "max_tokens",
       "integer"},
      {"negative max_tokens", "POST", chat_path, chat({{"max_tokens", -1}}), 400, "max_tokens",
       "at least 1"},
      {"zero max_completion_tokens", "POST", chat_path, chat({{"max_completion_tokens", 0}}), 400,
       "max_completion_tokens", "at least 1"},
      {"max_tokens beyond context", "POST", chat_path, chat({{"max_tokens", 1000}}), 400,
       "max_tokens", "maximum context length is 128"},
      {"n=0", "POST", chat_path, chat({{"n", 0}}), 400, "n", "[1, 16]"},
      {"stream type", "POST", chat_path, chat({{"stream", "yes"}}), 400, "stream", "boolean"},
      {"stop type", "POST", chat_path, chat({{"stop", 5}}), 400, "stop", "string"},
      {"stop element type", "POST", chat_path, chat({{"stop", {"a", 1}}}), 400, "stop[1]",
       "string"},
      {"top_logprobs without logprobs", "POST", chat_path, chat({{"top_logprobs", 2}}), 400,
       "top_logprobs", "logprobs"},
      {"top_logprobs range", "POST", chat_path, chat({{"logprobs", true}, {"top_logprobs", 21}}),
       400, "top_logprobs", "[0, 20]"},
      {"logprobs type", "POST", chat_path, chat({{"logprobs", 3}}), 400, "logprobs", "boolean"},
      {"reasoning_effort", "POST", chat_path, chat({{"reasoning_effort", "max"}}), 400,
       "reasoning_effort", "low, medium or high"},
      {"stream_options without stream", "POST", chat_path,
       chat({{"stream_options", {{"include_usage", true}}}}), 400, "stream_options", "stream"},
      {"tool without name", "POST", chat_path,
       chat({{"tools", {{{"type", "function"}, {"function", json::object()}}}}}), 400,
       "tools[0].function.name", "non-empty string"},
      {"tool type", "POST", chat_path, chat({{"tools", {{{"type", "web"}}}}}), 400,
       "tools[0].type", "function"},
      {"tool_choice required without tools", "POST", chat_path,
       chat({{"tool_choice", "required"}}), 400, "tool_choice", "requires 'tools'"},
      {"tool_calls on user", "POST", chat_path,
       R"({"messages": [{"role": "user", "content": "x", "tool_calls": []}]})", 400,
       "messages[0].tool_calls", "assistant"},
      {"presence_penalty", "POST", chat_path, chat({{"presence_penalty", 2.5}}), 400,
       "presence_penalty", "[-2, 2]"},
      {"frequency_penalty type", "POST", chat_path, chat({{"frequency_penalty", "x"}}), 400,
       "frequency_penalty", "number"},
      {"repetition_penalty 0", "POST", chat_path, chat({{"repetition_penalty", 0}}), 400,
       "repetition_penalty", "(0, 2]"},
      {"min_p", "POST", chat_path, chat({{"min_p", 1.5}}), 400, "min_p", "[0, 1]"},
      {"min_tokens above max_tokens", "POST", chat_path,
       chat({{"min_tokens", 9}, {"max_tokens", 3}}), 400, "min_tokens", "max_tokens = 3"},
      {"logit_bias key", "POST", chat_path, chat({{"logit_bias", {{"x", 1}}}}), 400,
       "logit_bias", "token ids"},
      {"logit_bias outside vocab", "POST", chat_path, chat({{"logit_bias", {{"99999", 1}}}}), 400,
       "logit_bias", "outside the vocabulary"},
      {"logit_bias range", "POST", chat_path, chat({{"logit_bias", {{"1", 101}}}}), 400,
       "logit_bias", "[-100, 100]"},
      {"bad_words blank", "POST", chat_path, chat({{"bad_words", {" "}}}), 400, "bad_words[0]",
       "blank"},
      {"skip_special_tokens type", "POST", chat_path, chat({{"skip_special_tokens", 1}}), 400,
       "skip_special_tokens", "boolean"},
      {"prompt missing", "POST", cmpl, R"({"max_tokens": 3})", 400, "prompt", "required"},
      {"prompt wrong type", "POST", cmpl, R"({"prompt": {"a": 1}})", 400, "prompt", "must be"},
      {"prompt empty string", "POST", cmpl, R"({"prompt": ""})", 400, "prompt", "empty"},
      {"prompt empty ids", "POST", cmpl, R"({"prompt": []})", 400, "prompt", "empty"},
      {"prompt id outside vocab", "POST", cmpl, R"({"prompt": [1, 999]})", 400, "prompt",
       "outside the vocabulary"},
      {"prompt id negative", "POST", cmpl, R"({"prompt": [1, -3]})", 400, "prompt[1]", "range"},
      {"prompt id not int", "POST", cmpl, R"({"prompt": [1, "x"]})", 400, "prompt[1]", "integer"},
      {"two prompts", "POST", cmpl, R"({"prompt": ["a", "b"]})", 400, "prompt", "one prompt"},
      {"prompt too long", "POST", cmpl,
       json{{"prompt", std::string(kMaxLen, 'x')}}.dump(), 400, "prompt",
       "maximum context length"},
      {"completion logprobs range", "POST", cmpl, R"({"prompt": "a", "logprobs": 21})", 400,
       "logprobs", "[0, 20]"},
      {"completion logprobs type", "POST", cmpl, R"({"prompt": "a", "logprobs": true})", 400,
       "logprobs", "integer"},
      {"suffix", "POST", cmpl, R"({"prompt": "a", "suffix": "z"})", 400, "suffix",
       "not supported"},
      {"best_of", "POST", cmpl, R"({"prompt": "a", "best_of": 3})", 400, "best_of", "must equal 'n'"},
      {"echo type", "POST", cmpl, R"({"prompt": "a", "echo": "yes"})", 400, "echo", "boolean"},
      {"completion unknown model", "POST", cmpl, R"({"prompt": "a", "model": "x"})", 404, "model",
       "does not exist"},
      {"tokenize neither", "POST", "/tokenize", R"({"model": "tiny-model"})", 400, "prompt",
       "exactly one"},
      {"unknown path", "GET", "/v1/nothing", "", 404, "", "/v1/nothing"},
      {"unknown POST path", "POST", "/v2/chat", "{}", 404, "", "/v2/chat"},
      {"wrong method", "GET", chat_path, "", 405, "", "not allowed"},
      {"wrong method models", "POST", "/v1/models", "{}", 405, "", "not allowed"},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.name);
    HttpResult r = HttpCall(port_, c.method, c.path, c.body);
    ASSERT_EQ(r.status, c.status) << r.body << r.error;
    EXPECT_EQ(r.header("content-type"), "application/json");
    json j = json::parse(r.body, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r.body;
    ASSERT_TRUE(j.contains("error")) << r.body;
    const json& e = j["error"];
    ASSERT_TRUE(e.contains("message") && e.contains("type") && e.contains("param") &&
                e.contains("code"))
        << r.body;
    EXPECT_NE(e["message"].get<std::string>().find(c.needle), std::string::npos) << r.body;
    if (c.param.empty()) {
      EXPECT_TRUE(e["param"].is_null()) << r.body;
    } else {
      EXPECT_EQ(e["param"], c.param) << r.body;
    }
    EXPECT_EQ(e["type"], c.status == 404 ? "not_found_error" : "invalid_request_error") << r.body;
    if (c.name == "unknown model") {
      EXPECT_EQ(e["code"], "model_not_found");
    }
    if (c.name == "max_tokens beyond context") {
      EXPECT_EQ(e["code"], "context_length_exceeded");
    }
    if (c.status == 405) {
      EXPECT_EQ(r.header("allow"), c.path == chat_path ? "POST" : "GET");
    }
  }
  EXPECT_EQ(engine_.num_requests(), 0u) << "no bad request may reach the engine";
  ExpectStillServing();
}

TEST_F(HttpFrontendTest, TenMegabyteBodyGets413AndServerKeepsServing) {
  const std::string big(10u << 20, 'a');
  std::string body = R"({"prompt": ")" + big + R"("})";
  HttpClient c(port_);
  // Written by a second thread: the server answers as soon as it sees the Content-Length.
  std::thread writer([&] {
    c.WriteRaw("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n");
    boost::system::error_code ec;
    boost::asio::write(c.socket(), boost::asio::buffer(body), ec);  // may fail once closed
  });
  HttpResult r = c.Read();
  writer.join();
  ASSERT_EQ(r.status, 413) << r.error;
  json e = json::parse(r.body)["error"];
  EXPECT_EQ(e["type"], "invalid_request_error");
  EXPECT_EQ(e["code"], "request_too_large");
  EXPECT_NE(e["message"].get<std::string>().find("8388608"), std::string::npos);
  ExpectStillServing();
}

TEST_F(HttpFrontendTest, MalformedHttpGets400) {
  HttpClient c(port_);
  c.WriteRaw("THIS IS NOT HTTP\r\n\r\n");
  HttpResult r = c.Read();
  EXPECT_EQ(r.status, 400) << r.error;
  ExpectStillServing();
}

TEST_F(HttpFrontendTest, KeepAliveServesSeveralRequestsOnOneConnection) {
  HttpClient c(port_);
  for (int i = 0; i < 3; ++i) {
    HttpResult r = c.Request("POST", "/v1/chat/completions", Chat({{"stream", i == 1}}).dump());
    ASSERT_EQ(r.status, 200) << r.error;
    EXPECT_EQ(r.header("connection"), "keep-alive");
  }
  EXPECT_EQ(c.Request("GET", "/v1/models").status, 200);
  EXPECT_EQ(engine_.num_requests(), 3u);
}

TEST_F(HttpFrontendTest, SubmitRejectionsMapTo429And503) {
  engine_.set_next_status(absl::ResourceExhaustedError("queue full"));
  HttpResult r = Post("/v1/chat/completions", Chat({{"stream", true}}));
  EXPECT_EQ(r.status, 429) << r.body;
  EXPECT_EQ(r.header("retry-after"), "1");
  json e = json::parse(r.body)["error"];
  EXPECT_EQ(e["type"], "rate_limit_error");
  EXPECT_EQ(e["message"], "queue full");

  engine_.set_next_status(absl::UnavailableError("draining"));
  r = Post("/v1/completions", {{"prompt", "a"}});
  EXPECT_EQ(r.status, 503) << r.body;
  EXPECT_EQ(json::parse(r.body)["error"]["message"], "draining");

  engine_.set_next_status(absl::OkStatus());
  ExpectStillServing();
}

TEST_F(HttpFrontendTest, StreamFailingMidwaySendsErrorEventThenDone) {
  engine_.set_script([](const GenerateRequest&) {
    GenerationEvent a;
    a.token_ids = {'o'};
    a.text = "o";
    GenerationEvent b;
    b.finished = true;
    b.finish_reason = FinishReason::kError;
    b.error = absl::UnavailableError("worker 3 lost");
    return std::vector<GenerationEvent>{a, b};
  });
  HttpResult r = Post("/v1/chat/completions", Chat({{"stream", true}}));
  ASSERT_EQ(r.status, 200);
  std::string err;
  auto events = SseEvents(r.body, &err);
  ASSERT_EQ(err, "");
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  json e = json::parse(events[events.size() - 2]);
  ASSERT_TRUE(e.contains("error")) << events[events.size() - 2];
  EXPECT_EQ(e["error"]["message"], "worker 3 lost");
  EXPECT_EQ(e["error"]["type"], "server_error");

  r = Post("/v1/chat/completions", Chat());  // non-streaming: an error status
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(json::parse(r.body)["error"]["message"], "worker 3 lost");
}

TEST_F(HttpFrontendTest, ClientDisconnectMidStreamCancelsTheRequest) {
  engine_.set_hold_after_first(true);
  HttpClient c(port_);
  c.WriteRaw("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
             "Content-Length: " + std::to_string(Chat({{"stream", true}}).dump().size()) +
             "\r\n\r\n" + Chat({{"stream", true}}).dump());
  std::string got;
  while (got.find("data: ") == std::string::npos) {
    std::string s = c.ReadSome();
    ASSERT_FALSE(s.empty()) << "stream ended early: " << got;
    got += s;
  }
  EXPECT_NE(got.find("text/event-stream"), std::string::npos);
  ASSERT_EQ(engine_.num_requests(), 1u);
  const std::string id = engine_.requests()[0].request_id;
  EXPECT_TRUE(engine_.cancelled().empty());
  // A reset: a FIN alone may be a half-close, which still gets the rest of the stream (the
  // next chunk written to a client that has gone fails, and that cancels too).
  c.Reset();
  EXPECT_TRUE(WaitFor([&] { return engine_.cancelled().count(id) == 1; }))
      << "Cancel was not called after the client went away";
  EXPECT_TRUE(WaitFor([&] { return fe_->open_connections() == 0; }));
  engine_.set_hold_after_first(false);
  ExpectStillServing();
}

TEST_F(HttpFrontendTest, ThreeHundredConcurrentStreamsAllComplete) {
  constexpr int kClients = 300;
  engine_.set_hold_after_first(true);
  std::vector<std::unique_ptr<HttpClient>> clients;
  const std::string body = Chat({{"stream", true}}).dump();
  const std::string req = "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                          "Content-Type: application/json\r\nContent-Length: " +
                          std::to_string(body.size()) + "\r\n\r\n" + body;
  for (int i = 0; i < kClients; ++i) {
    clients.push_back(std::make_unique<HttpClient>(port_));
    clients.back()->WriteRaw(req);
  }
  // All 300 are open and admitted at once, each stream waiting on the engine.
  ASSERT_TRUE(WaitFor([&] { return engine_.num_held() == kClients; },
                      std::chrono::milliseconds(20000)))
      << engine_.num_held();
  EXPECT_EQ(fe_->open_connections(), kClients);
  engine_.Release();
  for (int i = 0; i < kClients; ++i) {
    HttpResult r = clients[i]->Read();
    ASSERT_EQ(r.status, 200) << "client " << i << ": " << r.error;
    std::string err;
    auto events = SseEvents(r.body, &err);
    ASSERT_EQ(err, "") << "client " << i;
    ASSERT_EQ(events.back(), "[DONE]") << "client " << i;
    std::string content;
    for (size_t k = 0; k + 1 < events.size(); ++k) {
      json d = json::parse(events[k])["choices"][0]["delta"];
      if (d.contains("content")) content += d["content"].get<std::string>();
    }
    EXPECT_EQ(content, "Hello!") << "client " << i;
  }
  EXPECT_TRUE(engine_.cancelled().empty());
}

TEST(HttpFrontendStart, RejectsMissingPiecesAndBusyPort) {
  FakeTokenizer tok;
  FakeGenerationService engine;
  ServingContext ctx{"m", 16, &tok, nullptr, &engine, {}};
  HttpServerOptions opts;
  opts.host = "127.0.0.1";
  opts.port = 0;
  auto a = HttpFrontend::Start(ctx, opts);
  ASSERT_TRUE(a.ok()) << a.status();
  opts.port = (*a)->port();
  auto b = HttpFrontend::Start(ctx, opts);
  EXPECT_FALSE(b.ok());
  ServingContext no_engine = ctx;
  no_engine.engine = nullptr;
  opts.port = 0;
  EXPECT_FALSE(HttpFrontend::Start(no_engine, opts).ok());
  // Without a chat template the chat route answers 400 and completions still work.
  int port = (*a)->port();
  HttpResult r = HttpCall(port, "POST", "/v1/chat/completions",
                          R"({"messages": [{"role": "user", "content": "x"}]})");
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(HttpCall(port, "POST", "/v1/completions", R"({"prompt": "x", "max_tokens": 2})").status,
            200);
}

}  // namespace
}  // namespace mxserve::frontends
