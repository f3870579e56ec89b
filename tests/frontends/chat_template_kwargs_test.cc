// chat_template_kwargs on /v1/chat/completions: only the keys the model's chat template reads,
// each of its type, reach the render options; any other key, a wrong type, or a value the
// template refuses is a 400 naming chat_template_kwargs.KEY. And tool_choice reaches the
// template as the string the client sent.
#include <gtest/gtest.h>

#include "coordinator/frontends/api_error.h"
#include "coordinator/frontends/openai_api.h"
#include "tests/frontends/fakes.h"

namespace mxserve::frontends {
namespace {

using ::mxserve::testing::FakeChatTemplate;
using ::mxserve::testing::FakeGenerationService;

// Reads thinking and thinking_effort (as Kimi K3's does) and refuses an effort other than low.
class KwargsTemplate : public FakeChatTemplate {
 public:
  absl::StatusOr<std::vector<int32_t>> RenderIds(const std::vector<ChatMessage>& messages,
                                                 const ChatRenderOptions& options) const override {
    seen = options;
    if (!options.thinking_effort.empty() && options.thinking_effort != "low") {
      return absl::InvalidArgumentError("chat_template_kwargs.thinking_effort: must be low");
    }
    return FakeChatTemplate::RenderIds(messages, options);
  }
  std::vector<std::string> TemplateKwargs() const override { return {"thinking", "thinking_effort"}; }
  mutable ChatRenderOptions seen;
};

std::string Body(const std::string& extra) {
  return R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 1)" + extra + "}";
}

TEST(ChatTemplateKwargs, KnownKeysReachTheTemplate) {
  KwargsTemplate tmpl;
  FakeGenerationService engine;
  ServingContext ctx{"m", 64, &tmpl.tok, &tmpl, &engine, {}};
  auto r = ParseChatCompletionRequest(
      Body(R"(, "chat_template_kwargs": {"thinking": false, "thinking_effort": "low"})"), ctx);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(tmpl.seen.thinking, std::optional<bool>(false));
  EXPECT_EQ(tmpl.seen.thinking_effort, "low");
  EXPECT_EQ(r->render.thinking_effort, "low");
  ASSERT_TRUE(ParseChatCompletionRequest(Body(R"(, "chat_template_kwargs": {})"), ctx).ok());
  EXPECT_EQ(tmpl.seen.thinking, std::nullopt);
  EXPECT_EQ(tmpl.seen.thinking_effort, "");
}

TEST(ChatTemplateKwargs, BadKeysTypesAndValuesAreNamed) {
  KwargsTemplate tmpl;
  FakeChatTemplate plain;
  FakeGenerationService engine;
  ServingContext ctx{"m", 64, &tmpl.tok, &tmpl, &engine, {}};
  ServingContext plain_ctx{"m", 64, &plain.tok, &plain, &engine, {}};
  struct Case { const ServingContext* ctx; const char* kwargs; const char* param; const char* says; };
  for (const Case& c : {
           Case{&ctx, R"({"enable_thinking": true})", "chat_template_kwargs.enable_thinking",
                "it reads: thinking, thinking_effort"},
           Case{&plain_ctx, R"({"thinking": true})", "chat_template_kwargs.thinking",
                "it reads: none"},
           Case{&ctx, R"({"thinking": "yes"})", "chat_template_kwargs.thinking", "boolean"},
           Case{&ctx, R"({"thinking_effort": 3})", "chat_template_kwargs.thinking_effort", "string"},
           Case{&ctx, R"({"thinking_effort": "max"})", "chat_template_kwargs.thinking_effort",
                "must be low"},
           Case{&ctx, R"([1])", "chat_template_kwargs", "object"},
       }) {
    absl::Status s =
        ParseChatCompletionRequest(Body(std::string(R"(, "chat_template_kwargs": )") + c.kwargs),
                                   *c.ctx).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.kwargs;
    EXPECT_EQ(ParamOf(s), c.param) << s;
    EXPECT_NE(s.message().find(c.says), std::string::npos) << s;
  }
}

TEST(ChatTemplateKwargs, ToolChoiceStringReachesTheTemplate) {
  KwargsTemplate tmpl;
  FakeGenerationService engine;
  ServingContext ctx{"m", 64, &tmpl.tok, &tmpl, &engine, {}};
  const std::string tools =
      R"(, "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": )";
  ASSERT_TRUE(ParseChatCompletionRequest(Body(tools + "\"none\""), ctx).ok());
  EXPECT_EQ(tmpl.seen.tool_choice, "none");
  EXPECT_EQ(tmpl.seen.tools_json, "");  // none drops the tools, as before
  ASSERT_TRUE(ParseChatCompletionRequest(Body(tools + "\"auto\""), ctx).ok());
  EXPECT_EQ(tmpl.seen.tool_choice, "auto");
  ASSERT_TRUE(ParseChatCompletionRequest(Body(""), ctx).ok());
  EXPECT_EQ(tmpl.seen.tool_choice, "");
}

}  // namespace
}  // namespace mxserve::frontends
