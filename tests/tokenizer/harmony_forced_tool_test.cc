// tool_choice required/named on harmony: the prompt ends inside the forced call's header, and a
// parser made by NewParserFor starts as if it had read that header (name on the first delta).
#include <memory>
#include <string>
#include <vector>

#include "coordinator/chat/chat_template.h"
#include "coordinator/chat/harmony_chat_template.h"
#include "coordinator/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "tests/tokenizer/tiny_harmony.h"
#include "tools/tiny_tokenizer/tiny_tokenizer.h"

namespace mxserve {
namespace {

const Tokenizer& Tok() { return testing::TinyTok(); }
std::unique_ptr<ChatTemplate> Harmony() { return testing::TinyHarmony(); }

ChatRenderOptions Forced(const std::string& forced) {
  ChatRenderOptions o;
  o.current_date = "2025-06-28";
  o.tools_json =
      R"([{"type":"function","function":{"name":"get_weather","parameters":{"type":"object",)"
      R"("properties":{"city":{"type":"string"}}}}},)"
      R"({"type":"function","function":{"name":"get_time"}}])";
  o.forced_tool = forced;
  return o;
}

struct Out {
  std::string content, reasoning;
  std::vector<ChatOutputParser::ToolCallDelta> calls;  // merged per index
  int first_delta_with_name = -1;                      // index of the Push that named call 0
};

Out Drive(ChatOutputParser& p, const std::vector<int32_t>& ids) {
  Out o;
  int step = 0;
  auto take = [&](const ChatOutputParser::Delta& d) {
    o.content += d.content;
    o.reasoning += d.reasoning;
    for (const auto& c : d.tool_calls) {
      if (static_cast<size_t>(c.index) == o.calls.size()) {
        if (c.index == 0) o.first_delta_with_name = step;
        o.calls.push_back(c);
      } else {
        o.calls[c.index].arguments += c.arguments;
      }
    }
    ++step;
  };
  for (int32_t id : ids) take(p.Push(id));
  take(p.Finish());
  return o;
}

const std::vector<ChatMessage> kAsk = {{"user", "Weather in Paris?"}};

TEST(HarmonyForcedTool, NamedEndsThePromptInsideTheCallHeader) {
  auto t = Harmony();
  EXPECT_TRUE(t->CanForceToolCalls());
  auto text = t->Render(kAsk, Forced("get_weather"));
  ASSERT_TRUE(text.ok()) << text.status();
  const std::string tail =
      "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
      "<|message|>";
  ASSERT_GE(text->size(), tail.size());
  EXPECT_EQ(text->substr(text->size() - tail.size()), tail);
  // Without forcing, the prompt is the same up to "<|start|>assistant".
  auto plain = t->Render(kAsk, Forced(""));
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(*text, *plain + tail.substr(std::string("<|start|>assistant").size()));
  // RenderIds: the same, tokenized.
  auto ids = t->RenderIds(kAsk, Forced("get_weather"));
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(*ids, Tok().Encode(*text, true));
}

TEST(HarmonyForcedTool, RequiredLeavesTheNameToTheModel) {
  auto t = Harmony();
  auto text = t->Render(kAsk, Forced("*"));
  ASSERT_TRUE(text.ok());
  const std::string tail = "<|start|>assistant<|channel|>commentary to=functions.";
  EXPECT_EQ(text->substr(text->size() - tail.size()), tail);
  EXPECT_EQ(HarmonyForcedToolHeader(""), "");
}

TEST(HarmonyForcedTool, NamedParserReportsTheCallFromTheFirstToken) {
  auto t = Harmony();
  auto p = t->NewParserFor(Forced("get_weather"));
  Out o = Drive(*p, Tok().Encode("{\"city\":\"Paris\"}<|call|>", true));
  ASSERT_EQ(o.calls.size(), 1u);
  EXPECT_EQ(o.calls[0].index, 0);
  EXPECT_EQ(o.calls[0].name, "get_weather");
  EXPECT_EQ(o.calls[0].arguments, "{\"city\":\"Paris\"}");
  EXPECT_EQ(o.first_delta_with_name, 0);
  EXPECT_EQ(o.content, "");
  EXPECT_EQ(o.reasoning, "");
  // A turn cut off before any token still names the call (from Finish).
  auto q = t->NewParserFor(Forced("get_time"));
  Out e = Drive(*q, {});
  ASSERT_EQ(e.calls.size(), 1u);
  EXPECT_EQ(e.calls[0].name, "get_time");
  EXPECT_EQ(e.calls[0].arguments, "");
}

TEST(HarmonyForcedTool, RequiredParserTakesTheNameTheModelWrites) {
  auto t = Harmony();
  auto p = t->NewParserFor(Forced("*"));
  Out o = Drive(*p, Tok().Encode("get_time <|constrain|>json<|message|>{}<|call|>", true));
  ASSERT_EQ(o.calls.size(), 1u);
  EXPECT_EQ(o.calls[0].name, "get_time");
  EXPECT_EQ(o.calls[0].arguments, "{}");
  EXPECT_EQ(o.content, "");
  // The header text the model writes is never content, even when it never completes it.
  auto q = t->NewParserFor(Forced("*"));
  Out cut = Drive(*q, Tok().Encode("get_ti", true));
  EXPECT_TRUE(cut.calls.empty());
  EXPECT_EQ(cut.content, "");
}

TEST(HarmonyForcedTool, UnforcedParserIsThePlainOne) {
  auto t = Harmony();
  auto p = t->NewParserFor(Forced(""));
  Out o = Drive(*p, Tok().Encode("<|channel|>final<|message|>Hi<|return|>", true));
  EXPECT_EQ(o.content, "Hi");
  EXPECT_TRUE(o.calls.empty());
}

}  // namespace
}  // namespace mxserve
