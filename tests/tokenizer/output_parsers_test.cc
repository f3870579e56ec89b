// Kimi K2, Kimi K3 and DeepSeek output parsers: every fixture streamed cut at every character
// (and in one piece) gives the same message as the parser's whole-output reference, which
// follows vLLM's non-streamed parsers; and the registry's names and defaults.
#include <memory>
#include <string>
#include <vector>

#include "coordinator/chat/deepseek_output_parser.h"
#include "coordinator/chat/kimi_k2_output_parser.h"
#include "coordinator/chat/kimi_k3_output_parser.h"
#include "coordinator/chat/output_parser_registry.h"
#include "coordinator/chat/staged_output_parser.h"
#include "gtest/gtest.h"
#include "tiny_harmony.h"

namespace mxserve {
namespace {

using Stages = std::pair<std::unique_ptr<ReasoningStage>, std::unique_ptr<ToolStage>>;

// Feeds `text` in pieces cut at `cuts` and merges the deltas into one message.
ParsedOutput Stream(Stages s, const std::string& text, const std::vector<size_t>& cuts) {
  StagedOutputParser p(&testing::TinyTok(), std::move(s.first), std::move(s.second));
  ParsedOutput out;
  auto take = [&](const ChatOutputParser::Delta& d) {
    out.reasoning += d.reasoning;
    out.content += d.content;
    for (const auto& t : d.tool_calls) {
      EXPECT_EQ(t.index, static_cast<int>(out.tool_calls.size()));
      out.tool_calls.push_back({t.id, t.name, t.arguments});
    }
  };
  size_t at = 0;
  for (size_t c : cuts) {
    take(p.PushText(text.substr(at, c - at)));
    at = c;
  }
  take(p.PushText(text.substr(at)));
  take(p.Finish());
  return out;
}

// Every one-cut and two-adjacent-cut split, and the one-piece and char-by-char streams.
template <typename MakeStages>
void ExpectSplitInvariant(const std::string& text, const ParsedOutput& want, MakeStages make) {
  EXPECT_EQ(Stream(make(), text, {}), want) << text;
  std::vector<size_t> every;
  for (size_t i = 1; i < text.size(); ++i) every.push_back(i);
  EXPECT_EQ(Stream(make(), text, every), want) << "char by char: " << text;
  for (size_t i = 1; i < text.size(); ++i) {
    ParsedOutput got = Stream(make(), text, {i});
    ASSERT_EQ(got, want) << "cut at " << i << ": " << text;
  }
}

ParsedOutput Compose(std::pair<std::string, std::optional<std::string>> r, ParsedOutput tools) {
  tools.reasoning = r.first;
  return tools;
}

// ---------------------------------------------------------------------------------------------
// Kimi K2

ParsedOutput K2Reference(const std::string& text) {
  auto r = KimiK2Reasoning::Extract(text);
  return Compose(r, KimiK2Tools::Extract(r.second.value_or("")));
}
Stages K2() { return {std::make_unique<KimiK2Reasoning>(), std::make_unique<KimiK2Tools>()}; }

TEST(KimiK2Parser, ReferenceFollowsVllm) {
  const std::string call =
      "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
      "<|tool_call_argument_begin|>{\"city\": \"Beijing\"}<|tool_call_end|>"
      "<|tool_call_begin|> get_time:1 <|tool_call_argument_begin|> {} <|tool_call_end|>"
      "<|tool_calls_section_end|>";
  ParsedOutput got = K2Reference("I think.</think>Let me check." + call);
  EXPECT_EQ(got.reasoning, "I think.");
  EXPECT_EQ(got.content, "Let me check.");
  ASSERT_EQ(got.tool_calls.size(), 2u);
  EXPECT_EQ(got.tool_calls[0], (ParsedToolCall{"functions.get_weather:0", "get_weather",
                                               "{\"city\": \"Beijing\"}"}));
  EXPECT_EQ(got.tool_calls[1], (ParsedToolCall{"get_time:1", "get_time", "{}"}));
  // Reasoning ends at the tool section too; the output may open with <think>.
  got = K2Reference("<think>plan" + call);
  EXPECT_EQ(got.reasoning, "plan");
  EXPECT_EQ(got.content, "");
  EXPECT_EQ(got.tool_calls.size(), 2u);
  // Cut off inside reasoning: all reasoning.
  got = K2Reference("still thinking");
  EXPECT_EQ(got.reasoning, "still thinking");
  EXPECT_TRUE(got.content.empty());
  // A malformed header (no :IDX) or an unterminated call is not a call.
  got = K2Reference("</think><|tool_calls_section_begin|><|tool_call_begin|>functions.f"
                    "<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_call_begin|>g:2"
                    "<|tool_call_argument_begin|>{\"a\"");
  EXPECT_TRUE(got.tool_calls.empty());
}

TEST(KimiK2Parser, StreamedEqualsWholeAtEveryCut) {
  const std::vector<std::string> fixtures = {
      "I think.</think>Let me check.<|tool_calls_section_begin|><|tool_call_begin|>"
      "functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Beijing\"}"
      "<|tool_call_end|><|tool_call_begin|>functions.get_weather:1<|tool_call_argument_begin|>"
      "{\"city\": \"上海\"}<|tool_call_end|><|tool_calls_section_end|>",
      "<think>plan</think>The answer is 4.",
      "plan<|tool_calls_section_begin|><|tool_call_begin|>functions.a.b:3"
      "<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>",
      "plan<|tool_calls_section_begin|>x</think>after",  // a later </think> wins
      "<thi",
      "a</think>b<|tool_call_begin|>x:1<|tool_call_argument_begin|>[]<|tool_call_end|>c"
      "<|tool_calls_section_begin|><|tool_call_begin|>y:2<|tool_call_argument_begin|> 1 "
      "<|tool_call_end|>",
      "</think><|tool_calls_section_begin|><|tool_call_begin|>f:0<|tool_call_argument_begin|>{"
      "<|tool_call_begin|>g:1<|tool_call_argument_begin|>{}<|tool_call_end|>",
      "</think>content with < and <| and </thin",
  };
  for (const std::string& f : fixtures) ExpectSplitInvariant(f, K2Reference(f), K2);
}

// ---------------------------------------------------------------------------------------------
// DeepSeek

ParsedOutput DsReference(const std::string& text) {
  auto r = DeepSeekR1Reasoning::Extract(text);
  return Compose(r, DeepSeekV3Tools::Extract(r.second.value_or("")));
}
Stages Ds() {
  return {std::make_unique<DeepSeekR1Reasoning>(), std::make_unique<DeepSeekV3Tools>()};
}

const char kDsCalls[] =
    "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
    "{\"location\": \"Beijing\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function"
    "<｜tool▁sep｜>get_time\n```json\n{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>";

TEST(DeepSeekParser, ReferenceFollowsVllm) {
  ParsedOutput got = DeepSeekV3Tools::Extract(std::string("Checking.") + kDsCalls);
  EXPECT_EQ(got.content, "Checking.");
  ASSERT_EQ(got.tool_calls.size(), 2u);
  EXPECT_EQ(got.tool_calls[0], (ParsedToolCall{"", "get_weather", "{\"location\": \"Beijing\"}"}));
  EXPECT_EQ(got.tool_calls[1].name, "get_time");
  // A call of another type fails vLLM's validation: everything is content.
  std::string bad = std::string(kDsCalls);
  bad.replace(bad.rfind("function"), 8, "builtin");
  got = DeepSeekV3Tools::Extract(bad);
  EXPECT_EQ(got.content, bad);
  EXPECT_TRUE(got.tool_calls.empty());
  // Multi-line arguments do not match (no DOTALL).
  got = DeepSeekV3Tools::Extract("<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f"
                                 "\n```json\n{\n}\n```<｜tool▁call▁end｜>");
  EXPECT_TRUE(got.tool_calls.empty());
  EXPECT_EQ(DeepSeekR1Reasoning::Extract("<think>r</think>c").first, "r");
}

TEST(DeepSeekParser, StreamedEqualsWholeAtEveryCut) {
  const std::vector<std::string> fixtures = {
      std::string("r</think>Checking.") + kDsCalls,
      "<think>r</think>just text",
      "<think>r<think>s</think>c",
      "cut inside reasoning",
  };
  for (const std::string& f : fixtures) ExpectSplitInvariant(f, DsReference(f), Ds);
  std::string bad = std::string("</think>x") + kDsCalls;
  bad.replace(bad.rfind("function"), 8, "builtin");
  ExpectSplitInvariant(bad, DsReference(bad), Ds);
}

// ---------------------------------------------------------------------------------------------
// Kimi K3

ParsedOutput K3Reference(const std::string& text, bool tools) {
  auto r = KimiK3Reasoning::Extract(text);
  return Compose(r, KimiK3Tools::Extract(r.second.value_or(""), tools));
}

const char kK3[] =
    "Need weather.<|close|>think<|sep|><|open|>response<|sep|>Checking.<|close|>response<|sep|>"
    "<|open|>tools<|sep|><|open|>call tool=\"get_weather\" index=\"1\"<|sep|>"
    "<|open|>argument key=\"city\" type=\"string\"<|sep|>London<|close|>argument<|sep|>"
    "<|open|>argument key=\"days\" type=\"number\"<|sep|>3.0<|close|>argument<|sep|>"
    "<|open|>argument key=\"opts\" type=\"object\"<|sep|>{\"a\":[1,true]}<|close|>argument<|sep|>"
    "<|close|>call<|sep|><|open|>call tool=\"a&quot;b&amp;c\" index=\"2\"<|sep|><|close|>call<|sep|>"
    "<|close|>tools<|sep|><|close|>message<|sep|>";

TEST(KimiK3Parser, ReferenceFollowsVllm) {
  ParsedOutput got = K3Reference(kK3, true);
  EXPECT_EQ(got.reasoning, "Need weather.");
  EXPECT_EQ(got.content, "Checking.");
  ASSERT_EQ(got.tool_calls.size(), 2u);
  EXPECT_EQ(got.tool_calls[0].name, "get_weather");
  EXPECT_EQ(got.tool_calls[0].arguments,
            "{\"city\": \"London\", \"days\": 3.0, \"opts\": {\"a\": [1, true]}}");
  EXPECT_EQ(got.tool_calls[1].name, "a\"b&c");
  EXPECT_EQ(got.tool_calls[1].arguments, "{}");
  // Without tools the response channel is unwrapped and the tools channel stays text.
  got = K3Reference("r<|close|>think<|sep|><|open|>response<|sep|>Hi<|close|>response<|sep|>"
                    "<|close|>message<|sep|>", false);
  EXPECT_EQ(got.content, "Hi");
}

TEST(KimiK3Parser, StreamedEqualsWholeAtEveryCut) {
  const std::vector<std::string> fixtures = {
      kK3,
      "<|open|>think<|sep|>r<|close|>think<|sep|><|open|>response<|sep|>Hi<|close|>response"
      "<|sep|><|close|>message<|sep|>",
      "r<|close|>think<|sep|><|open|>response<|sep|>cut <off",
      "r<|close|>think<|sep|>no wrapper<|close|>message<|sep|>",
  };
  for (bool tools : {true, false}) {
    for (const std::string& f : fixtures) {
      ExpectSplitInvariant(f, K3Reference(f, tools), [tools] {
        return Stages{std::make_unique<KimiK3Reasoning>(), std::make_unique<KimiK3Tools>(tools)};
      });
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Registry

TEST(OutputParserRegistry, NamesAndDefaults) {
  const Tokenizer* tok = &testing::TinyTok();
  OutputParserChoice got;
  auto f = MakeOutputParserFactory({}, "gpt_oss", tok, &got);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_FALSE(*f);  // harmony: the template's own parser
  EXPECT_EQ(got.tool_call_parser, "openai");
  auto bad = MakeOutputParserFactory({"hermes", ""}, "gpt_oss", tok);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--tool-call-parser: unknown parser \"hermes\""),
            std::string::npos);
  bad = MakeOutputParserFactory({"", "qwen3"}, "gpt_oss", tok);
  EXPECT_NE(bad.status().message().find("--reasoning-parser"), std::string::npos);
  bad = MakeOutputParserFactory({"kimi_k2", ""}, "gpt_oss", tok);
  EXPECT_FALSE(bad.ok());
  // The tiny tokenizer has none of Kimi's tokens: the error names the missing one.
  bad = MakeOutputParserFactory({}, "kimi_k2", tok);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("<|tool_calls_section_begin|>"), std::string::npos);
  // K3's markers are ordinary tokens: any tokenizer serves.
  f = MakeOutputParserFactory({}, "kimi_k3", tok, &got);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(got.reasoning_parser, "kimi_k3");
  EXPECT_TRUE(*f);
  EXPECT_FALSE(MakeOutputParserFactory({}, "llama", tok).ok());
}

}  // namespace
}  // namespace mxserve
