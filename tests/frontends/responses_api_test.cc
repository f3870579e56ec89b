// POST /v1/responses over a real socket with the fake engine, tokenizer and chat template of
// fakes.h: input items as the chat messages the template is given, output items and usage,
// the streamed events (names, order, sequence numbers), and a 400 naming every refused field.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "tests/frontends/http_fixture.h"

namespace mxserve::testing {
namespace {

using json = nlohmann::json;

class ResponsesApiTest : public HttpFrontendFixture {
 protected:
  static json Req(json extra = json::object()) {
    json j{{"model", kModel}, {"input", "Hi"}};
    for (auto& [k, v] : extra.items()) j[k] = v;
    return j;
  }
  void Script(std::vector<int32_t> tokens) {
    engine_.set_script([tokens](const GenerateRequest& req) {
      return FakeGenerationService::TextScript(req, tokens);
    });
  }
};

// Parses "event: T\ndata: J\n\n" frames, checking the framing, that data.type equals the
// event name and that sequence_number counts 0, 1, 2, ...
std::vector<json> Events(const std::string& body, std::string* error) {
  std::vector<json> out;
  if (!absl::EndsWith(body, "\n\n")) {
    *error = "body does not end with a blank line";
    return {};
  }
  for (absl::string_view frame : absl::StrSplit(body.substr(0, body.size() - 2), "\n\n")) {
    std::vector<std::string> lines = absl::StrSplit(frame, '\n');
    if (lines.size() != 2 || !absl::StartsWith(lines[0], "event: ") ||
        !absl::StartsWith(lines[1], "data: ")) {
      *error = absl::StrCat("bad frame: ", frame);
      return {};
    }
    json data = json::parse(lines[1].substr(6), nullptr, false);
    if (data.is_discarded() || data.value("type", "") != lines[0].substr(7)) {
      *error = absl::StrCat("data does not match its event: ", frame);
      return {};
    }
    if (data.value("sequence_number", -1) != static_cast<int>(out.size())) {
      *error = absl::StrCat("sequence_number ", data.value("sequence_number", -1), ", want ",
                            out.size());
      return {};
    }
    out.push_back(std::move(data));
  }
  return out;
}

std::vector<std::string> Types(const std::vector<json>& events) {
  std::vector<std::string> t;
  for (const json& e : events) t.push_back(e["type"]);
  return t;
}

TEST_F(ResponsesApiTest, TextInputGivesOneMessage) {
  HttpResult r = Post("/v1/responses", Req({{"instructions", "Be brief."}}));
  ASSERT_EQ(r.status, 200) << r.body;
  json b = json::parse(r.body);
  EXPECT_TRUE(absl::StartsWith(b["id"].get<std::string>(), "resp_")) << b["id"];
  EXPECT_EQ(b["object"], "response");
  EXPECT_EQ(b["model"], kModel);
  EXPECT_EQ(b["status"], "completed");
  EXPECT_EQ(b["instructions"], "Be brief.");
  EXPECT_EQ(b["store"], false);
  ASSERT_EQ(b["output"].size(), 1u) << b;
  const json& msg = b["output"][0];
  EXPECT_EQ(msg["type"], "message");
  EXPECT_EQ(msg["role"], "assistant");
  EXPECT_EQ(msg["status"], "completed");
  EXPECT_TRUE(absl::StartsWith(msg["id"].get<std::string>(), "msg_"));
  EXPECT_EQ(msg["content"][0]["type"], "output_text");
  EXPECT_EQ(msg["content"][0]["text"], "Hello!");
  const GenerateRequest sent = engine_.requests().back();
  EXPECT_EQ(b["usage"]["input_tokens"], sent.prompt_tokens.size());
  EXPECT_EQ(b["usage"]["output_tokens"], 6);
  EXPECT_EQ(b["usage"]["total_tokens"], sent.prompt_tokens.size() + 6);
  EXPECT_EQ(b["usage"]["output_tokens_details"]["reasoning_tokens"], 0);
  std::vector<ChatMessage> m = tmpl_.last_messages();
  ASSERT_EQ(m.size(), 2u);
  EXPECT_EQ(m[0].role, "developer");
  EXPECT_EQ(m[0].content, "Be brief.");
  EXPECT_EQ(m[1].role, "user");
  EXPECT_EQ(m[1].content, "Hi");
  // The template's stop tokens end the turn, as for chat.
  EXPECT_NE(std::find(sent.params.stop_token_ids.begin(), sent.params.stop_token_ids.end(),
                      FakeTokenizer::kEnd),
            sent.params.stop_token_ids.end());
}

TEST_F(ResponsesApiTest, SamplingFieldsReachTheEngineAndAreEchoed) {
  HttpResult r = Post("/v1/responses", Req({{"temperature", 0.5},
                                            {"top_p", 0.25},
                                            {"max_output_tokens", 4},
                                            {"reasoning", {{"effort", "high"}}},
                                            {"metadata", {{"k", "v"}}},
                                            {"store", true}}));
  ASSERT_EQ(r.status, 200) << r.body;
  const GenerateRequest sent = engine_.requests().back();
  EXPECT_FLOAT_EQ(sent.params.temperature, 0.5f);
  EXPECT_FLOAT_EQ(sent.params.top_p, 0.25f);
  EXPECT_EQ(sent.params.max_tokens, 4);
  EXPECT_EQ(tmpl_.last_effort(), "high");
  json b = json::parse(r.body);
  EXPECT_EQ(b["temperature"], 0.5);
  EXPECT_EQ(b["max_output_tokens"], 4);
  EXPECT_EQ(b["reasoning"]["effort"], "high");
  EXPECT_EQ(b["metadata"]["k"], "v");
  // "Hello!" cut at 4 tokens: incomplete, as OpenAI and vLLM say it.
  EXPECT_EQ(b["status"], "incomplete");
  EXPECT_EQ(b["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_EQ(b["output"][0]["content"][0]["text"], "Hell");
  EXPECT_EQ(b["output"][0]["status"], "incomplete");
}

TEST_F(ResponsesApiTest, ReasoningThenMessage) {
  Script({FakeTokenizer::kThink, 'h', 'm', FakeTokenizer::kAnswer, 'O', 'K', FakeTokenizer::kEnd});
  HttpResult r = Post("/v1/responses", Req());
  ASSERT_EQ(r.status, 200) << r.body;
  json b = json::parse(r.body);
  ASSERT_EQ(b["output"].size(), 2u) << b;
  EXPECT_EQ(b["output"][0]["type"], "reasoning");
  EXPECT_TRUE(absl::StartsWith(b["output"][0]["id"].get<std::string>(), "rs_"));
  EXPECT_EQ(b["output"][0]["content"][0]["type"], "reasoning_text");
  EXPECT_EQ(b["output"][0]["content"][0]["text"], "hm");
  EXPECT_EQ(b["output"][1]["type"], "message");
  EXPECT_EQ(b["output"][1]["content"][0]["text"], "OK");
  EXPECT_EQ(b["usage"]["output_tokens_details"]["reasoning_tokens"], 2);
}

TEST_F(ResponsesApiTest, FunctionCallAndToolsInTheTemplate) {
  Script({FakeTokenizer::kCall, '{', '}'});
  json tools = json::array({{{"type", "function"},
                             {"name", "lookup"},
                             {"description", "Looks up."},
                             {"parameters", {{"type", "object"}}}}});
  HttpResult r = Post("/v1/responses", Req({{"tools", tools}, {"tool_choice", "auto"}}));
  ASSERT_EQ(r.status, 200) << r.body;
  json b = json::parse(r.body);
  ASSERT_EQ(b["output"].size(), 1u) << b;
  const json& call = b["output"][0];
  EXPECT_EQ(call["type"], "function_call");
  EXPECT_EQ(call["name"], "lookup");
  EXPECT_EQ(call["arguments"], "{}");
  EXPECT_EQ(call["status"], "completed");
  EXPECT_TRUE(absl::StartsWith(call["call_id"].get<std::string>(), "call_"));
  EXPECT_TRUE(absl::StartsWith(call["id"].get<std::string>(), "fc_"));
  EXPECT_EQ(b["tools"], tools);  // echoed in the request's shape
  json chat_tools = json::parse(tmpl_.last_tools_json());
  ASSERT_EQ(chat_tools.size(), 1u);
  EXPECT_EQ(chat_tools[0]["type"], "function");
  EXPECT_EQ(chat_tools[0]["function"]["name"], "lookup");
  EXPECT_EQ(chat_tools[0]["function"]["description"], "Looks up.");
  EXPECT_EQ(chat_tools[0]["function"]["parameters"], json({{"type", "object"}}));

  // tool_choice "none" hides the tools from the template.
  r = Post("/v1/responses", Req({{"tools", tools}, {"tool_choice", "none"}}));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(tmpl_.last_tools_json(), "");
}

TEST_F(ResponsesApiTest, InputItemsBecomeChatMessages) {
  json input = json::array({
      {{"role", "system"}, {"content", "Use tools."}},
      {{"type", "message"}, {"role", "user"},
       {"content", json::array({{{"type", "input_text"}, {"text", "What is 6*7?"}}})}},
      {{"type", "reasoning"}, {"id", "rs_1"}, {"summary", json::array()},
       {"content", json::array({{{"type", "reasoning_text"}, {"text", "Use lookup."}}})}},
      {{"type", "function_call"}, {"call_id", "call_1"}, {"name", "lookup"},
       {"arguments", "{\"q\":\"6*7\"}"}, {"id", "fc_1"}, {"status", "completed"}},
      {{"type", "function_call_output"}, {"call_id", "call_1"}, {"output", "42"}},
      {{"type", "message"}, {"role", "assistant"}, {"id", "msg_1"}, {"status", "completed"},
       {"content", json::array({{{"type", "output_text"}, {"text", "42."},
                                 {"annotations", json::array()}}})}},
      {{"role", "user"}, {"content", "Thanks"}},
  });
  HttpResult r = Post("/v1/responses", Req({{"input", input}, {"instructions", "Be brief."}}));
  ASSERT_EQ(r.status, 200) << r.body;
  std::vector<ChatMessage> m = tmpl_.last_messages();
  ASSERT_EQ(m.size(), 6u);
  EXPECT_EQ(m[0].role, "developer");
  EXPECT_EQ(m[0].content, "Be brief.\n\nUse tools.");
  EXPECT_EQ(m[1].role, "user");
  EXPECT_EQ(m[1].content, "What is 6*7?");
  EXPECT_EQ(m[2].role, "assistant");
  EXPECT_EQ(m[2].reasoning, "Use lookup.");
  json calls = json::parse(m[2].tool_calls_json);
  EXPECT_EQ(calls[0]["id"], "call_1");
  EXPECT_EQ(calls[0]["function"]["name"], "lookup");
  EXPECT_EQ(calls[0]["function"]["arguments"], "{\"q\":\"6*7\"}");
  EXPECT_EQ(m[3].role, "tool");
  EXPECT_EQ(m[3].name, "lookup");
  EXPECT_EQ(m[3].tool_call_id, "call_1");
  EXPECT_EQ(m[3].content, "42");
  EXPECT_EQ(m[4].role, "assistant");
  EXPECT_EQ(m[4].content, "42.");
  EXPECT_EQ(m[4].reasoning, "");
  EXPECT_EQ(m[5].role, "user");
  EXPECT_EQ(m[5].content, "Thanks");
}

TEST_F(ResponsesApiTest, ReasoningSummaryStandsInForMissingContent) {
  json input = json::array({
      {{"role", "user"}, {"content", "Q"}},
      {{"type", "reasoning"}, {"summary", json::array({{{"type", "summary_text"}, {"text", "a"}},
                                                     {{"type", "summary_text"}, {"text", "b"}}})}},
      {{"type", "function_call"}, {"call_id", "c"}, {"name", "f"}, {"arguments", "{}"}},
      {{"type", "reasoning"},
       {"content", json::array({{{"type", "reasoning_text"}, {"text", "kept"}}})},
       {"summary", json::array({{{"type", "summary_text"}, {"text", "dropped"}}})}},
      {{"type", "function_call"}, {"call_id", "d"}, {"name", "f"}, {"arguments", "{}"}},
  });
  HttpResult r = Post("/v1/responses", Req({{"input", input}}));
  ASSERT_EQ(r.status, 200) << r.body;
  std::vector<ChatMessage> m = tmpl_.last_messages();
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[1].reasoning, "a\nb");
  EXPECT_EQ(m[2].reasoning, "kept");

  input = json::array({{{"type", "reasoning"},
                        {"content", json::array({{{"type", "output_text"}, {"text", "x"}}})}}});
  r = Post("/v1/responses", Req({{"input", input}}));
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(json::parse(r.body)["error"]["param"], "input[0].content[0].type") << r.body;
}

TEST_F(ResponsesApiTest, RefusedFieldsAreNamed) {
  const json fn_tool = json::array({{{"type", "function"}, {"name", "lookup"}}});
  struct Case {
    json extra;
    int status;
    std::string param;
  };
  const std::vector<Case> cases = {
      {{{"frobnicate", 1}}, 400, "frobnicate"},
      {{{"previous_response_id", "resp_x"}}, 404, "previous_response_id"},
      {{{"background", true}}, 400, "background"},
      {{{"include", {"message.output_text.logprobs"}}}, 400, "include[0]"},
      {{{"top_logprobs", 2}}, 400, "top_logprobs"},
      {{{"truncation", "auto"}}, 400, "truncation"},
      {{{"text", {{"format", {{"type", "json_object"}}}}}}, 400, "text.format"},
      {{{"reasoning", {{"effort", "minimal"}}}}, 400, "reasoning.effort"},
      {{{"reasoning", {{"summary", "auto"}}}}, 400, "reasoning.summary"},
      {{{"temperature", 3}}, 400, "temperature"},
      {{{"max_output_tokens", 0}}, 400, "max_output_tokens"},
      {{{"max_output_tokens", 100000}}, 400, "max_output_tokens"},
      {{{"model", "other"}}, 404, "model"},
      {{{"input", nullptr}}, 400, "input"},
      {{{"input", json::array()}}, 400, "input"},
      {{{"input", 5}}, 400, "input"},
      {{{"tools", {{{"type", "web_search_preview"}}}}}, 400, "tools[0].type"},
      {{{"tools", {{{"type", "function"}, {"name", "f"}, {"strict", true}}}}}, 400,
       "tools[0].strict"},
      {{{"tools", {{{"type", "function"}, {"function", {{"name", "f"}}}}}}}, 400,
       "tools[0].function"},
      {{{"tools", fn_tool}, {"tool_choice", {{"type", "function"}, {"name", "nope"}}}}, 400,
       "tool_choice"},
      {{{"tool_choice", {{"type", "web_search_preview"}}}}, 400, "tool_choice"},
      {{{"tool_choice", "sometimes"}}, 400, "tool_choice"},
      {{{"input", {{{"type", "item_reference"}, {"id", "x"}}}}}, 400, "input[0].type"},
      {{{"input", {{{"role", "user"}, {"content", {{{"type", "input_image"}}}}}}}}, 400,
       "input[0].content[0].type"},
      {{{"input", {{{"role", "user"}, {"content", "a"}, {"name", "x"}}}}}, 400, "input[0].name"},
      {{{"input", {{{"role", "user"}, {"content", "a"}}, {{"role", "system"}, {"content", "b"}}}}},
       400, "input[1].role"},
      {{{"input", {{{"role", "tool"}, {"content", "a"}}}}}, 400, "input[0].role"},
      {{{"input", {{{"type", "function_call_output"}, {"call_id", "c9"}, {"output", "1"}}}}},
       400, "input[0].call_id"},
      {{{"input", {{{"type", "function_call"}, {"call_id", "c9"}, {"name", "f"}}}}}, 400,
       "input[0].arguments"},
      {{{"input", {{{"type", "reasoning"}, {"encrypted_content", "zz"}}}}}, 400,
       "input[0].encrypted_content"},
  };
  for (const Case& c : cases) {
    HttpResult r = Post("/v1/responses", Req(c.extra));
    EXPECT_EQ(r.status, c.status) << c.extra << " -> " << r.body;
    json b = json::parse(r.body, nullptr, false);
    ASSERT_FALSE(b.is_discarded()) << r.body;
    EXPECT_EQ(b["error"]["param"], c.param) << c.extra << " -> " << r.body;
  }
  EXPECT_EQ(engine_.num_requests(), 0u);  // nothing refused reached the engine
  HttpResult bad = HttpCall(port_, "POST", "/v1/responses", "{\"input\": ");
  EXPECT_EQ(bad.status, 400) << bad.body;
}

TEST_F(ResponsesApiTest, AcceptedDefaultsPass) {
  HttpResult r = Post("/v1/responses",
                      Req({{"store", false}, {"background", false}, {"include", json::array()},
                           {"truncation", "disabled"}, {"service_tier", "auto"},
                           {"parallel_tool_calls", false}, {"user", "u1"},
                           {"text", {{"format", {{"type", "text"}}}}}, {"top_logprobs", 0},
                           {"request_id", "resp_mine"}}));
  ASSERT_EQ(r.status, 200) << r.body;
  json b = json::parse(r.body);
  EXPECT_EQ(b["id"], "resp_mine");
  EXPECT_EQ(b["user"], "u1");
  EXPECT_EQ(b["parallel_tool_calls"], false);
}

TEST_F(ResponsesApiTest, StreamedEventsInOrder) {
  Script({FakeTokenizer::kThink, 'h', 'm', FakeTokenizer::kAnswer, 'O', 'K', FakeTokenizer::kEnd});
  HttpResult r = Post("/v1/responses", Req({{"stream", true}}));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_TRUE(absl::StartsWith(r.header("content-type"), "text/event-stream"));
  std::string err;
  std::vector<json> ev = Events(r.body, &err);
  ASSERT_TRUE(err.empty()) << err << "\n" << r.body;
  const std::vector<std::string> want = {
      "response.created",           "response.in_progress",
      "response.output_item.added", "response.reasoning_part.added",
      "response.reasoning_text.delta", "response.reasoning_text.delta",
      "response.reasoning_text.done", "response.reasoning_part.done",
      "response.output_item.done",  "response.output_item.added",
      "response.content_part.added", "response.output_text.delta",
      "response.output_text.delta", "response.output_text.done",
      "response.content_part.done", "response.output_item.done",
      "response.completed"};
  ASSERT_EQ(Types(ev), want) << r.body;
  EXPECT_EQ(ev[0]["response"]["status"], "in_progress");
  EXPECT_EQ(ev[0]["response"]["output"], json::array());
  EXPECT_EQ(ev[2]["output_index"], 0);
  EXPECT_EQ(ev[2]["item"]["type"], "reasoning");
  const std::string rs_id = ev[2]["item"]["id"];
  EXPECT_EQ(ev[4]["item_id"], rs_id);
  EXPECT_EQ(ev[4]["delta"].get<std::string>() + ev[5]["delta"].get<std::string>(), "hm");
  EXPECT_EQ(ev[6]["text"], "hm");
  EXPECT_EQ(ev[8]["item"]["status"], "completed");
  EXPECT_EQ(ev[9]["output_index"], 1);
  EXPECT_EQ(ev[9]["item"]["type"], "message");
  const std::string msg_id = ev[9]["item"]["id"];
  EXPECT_EQ(ev[11]["item_id"], msg_id);
  EXPECT_EQ(ev[11]["output_index"], 1);
  EXPECT_EQ(ev[11]["content_index"], 0);
  EXPECT_EQ(ev[13]["text"], "OK");
  EXPECT_EQ(ev[15]["item"]["content"][0]["text"], "OK");
  const json& done = ev.back()["response"];
  EXPECT_EQ(done["status"], "completed");
  ASSERT_EQ(done["output"].size(), 2u);
  EXPECT_EQ(done["output"][0]["id"], rs_id);
  EXPECT_EQ(done["output"][1]["id"], msg_id);
  EXPECT_EQ(done["output"][1]["content"][0]["text"], "OK");
  EXPECT_EQ(done["usage"]["output_tokens"], 7);
  EXPECT_EQ(done["id"], ev[0]["response"]["id"]);
  EXPECT_EQ(r.body.find("[DONE]"), std::string::npos);
}

TEST_F(ResponsesApiTest, StreamedFunctionCall) {
  Script({FakeTokenizer::kCall, '{', '}'});
  HttpResult r = Post("/v1/responses",
                      Req({{"stream", true},
                           {"tools", json::array({{{"type", "function"}, {"name", "lookup"}}})}}));
  ASSERT_EQ(r.status, 200) << r.body;
  std::string err;
  std::vector<json> ev = Events(r.body, &err);
  ASSERT_TRUE(err.empty()) << err << "\n" << r.body;
  const std::vector<std::string> want = {
      "response.created", "response.in_progress", "response.output_item.added",
      "response.function_call_arguments.delta", "response.function_call_arguments.delta",
      "response.function_call_arguments.done", "response.output_item.done",
      "response.completed"};
  ASSERT_EQ(Types(ev), want) << r.body;
  EXPECT_EQ(ev[2]["item"]["type"], "function_call");
  EXPECT_EQ(ev[2]["item"]["name"], "lookup");
  EXPECT_EQ(ev[2]["item"]["arguments"], "");
  EXPECT_EQ(ev[5]["arguments"], "{}");
  EXPECT_EQ(ev[6]["item"]["arguments"], "{}");
  EXPECT_EQ(ev[6]["item"]["call_id"], ev[2]["item"]["call_id"]);
  EXPECT_EQ(ev.back()["response"]["output"][0]["call_id"], ev[2]["item"]["call_id"]);
}

TEST_F(ResponsesApiTest, StreamEndsWithAnErrorEventWhenTheEngineFails) {
  engine_.set_script([](const GenerateRequest&) {
    GenerationEvent a;
    a.token_ids = {'x'};
    a.text = "x";
    GenerationEvent b;
    b.finished = true;
    b.finish_reason = FinishReason::kError;
    b.error = absl::UnavailableError("worker lost");
    return std::vector<GenerationEvent>{a, b};
  });
  HttpResult r = Post("/v1/responses", Req({{"stream", true}}));
  ASSERT_EQ(r.status, 200) << r.body;
  std::string err;
  std::vector<json> ev = Events(r.body, &err);
  ASSERT_TRUE(err.empty()) << err << "\n" << r.body;
  ASSERT_FALSE(ev.empty());
  EXPECT_EQ(ev.back()["type"], "error");
  EXPECT_EQ(ev.back()["message"], "worker lost");

  r = Post("/v1/responses", Req());
  EXPECT_EQ(r.status, 503) << r.body;
}

}  // namespace
}  // namespace mxserve::testing
