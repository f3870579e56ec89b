#include "coordinator/chat/harmony_chat_template.h"

#include <ctime>

#include "absl/strings/str_cat.h"
#include "coordinator/chat/harmony_output_parser.h"
#include "coordinator/tokenizer/tokenizer.h"

namespace mxserve {
namespace {

std::string TodayUtc() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[16];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d", &tm);
  return buf;
}

bool IsDate(const std::string& d) {
  if (d.size() != 10 || d[4] != '-' || d[7] != '-') return false;
  for (int i : {0, 1, 2, 3, 5, 6, 8, 9})
    if (d[i] < '0' || d[i] > '9') return false;
  return true;
}

}  // namespace

std::string JsonQuote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out.push_back(static_cast<char>(c));
        }
    }
  }
  out += "\"";
  return out;
}

absl::StatusOr<std::unique_ptr<HarmonyChatTemplate>> HarmonyChatTemplate::Create(
    const Tokenizer* tokenizer) {
  if (tokenizer == nullptr) return absl::InvalidArgumentError("harmony chat template: no tokenizer");
  HarmonyTokens t{};
  const std::pair<const char*, int32_t*> want[] = {
      {"<|start|>", &t.start},     {"<|end|>", &t.end},           {"<|message|>", &t.message},
      {"<|channel|>", &t.channel}, {"<|constrain|>", &t.constrain}, {"<|return|>", &t.ret},
      {"<|call|>", &t.call}};
  for (const auto& [name, dst] : want) {
    auto id = tokenizer->SpecialTokenId(name);
    if (!id) {
      return absl::InvalidArgumentError(
          absl::StrCat("harmony chat template: the tokenizer has no ", name, " token"));
    }
    *dst = *id;
  }
  return std::unique_ptr<HarmonyChatTemplate>(new HarmonyChatTemplate(tokenizer, t));
}

absl::StatusOr<std::string> HarmonyChatTemplate::Render(const std::vector<ChatMessage>& messages,
                                                        const ChatRenderOptions& options) const {
  if (messages.empty()) return absl::InvalidArgumentError("messages: the conversation is empty");
  const std::string& effort = options.reasoning_effort;
  if (effort != "low" && effort != "medium" && effort != "high") {
    return absl::InvalidArgumentError(absl::StrCat(
        "reasoning_effort: must be one of low, medium, high (got \"", effort, "\")"));
  }
  if (!options.current_date.empty() && !IsDate(options.current_date)) {
    return absl::InvalidArgumentError(
        absl::StrCat("current_date: expected YYYY-MM-DD, got \"", options.current_date, "\""));
  }
  const std::string date = options.current_date.empty() ? TodayUtc() : options.current_date;

  std::string out = absl::StrCat(
      "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
      "Knowledge cutoff: 2024-06\nCurrent date: ",
      date, "\n\nReasoning: ", effort,
      "\n\n# Valid channels: analysis, commentary, final. Channel must be included for every "
      "message.<|end|>");

  size_t first = 0;
  if (messages[0].role == "system" || messages[0].role == "developer") {
    first = 1;
    if (!messages[0].content.empty()) {
      absl::StrAppend(&out, "<|start|>developer<|message|># Instructions\n\n", messages[0].content,
                      "\n\n<|end|>");
    }
  }
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    const std::string where = absl::StrCat("messages[", i, "]");
    if (m.role == "user") {
      absl::StrAppend(&out, "<|start|>user<|message|>", m.content, "<|end|>");
    } else if (m.role == "assistant") {
      if (m.content.find("<|channel|>analysis<|message|>") != std::string::npos ||
          m.content.find("<|channel|>final<|message|>") != std::string::npos) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ".content: holds harmony <|channel|> tags; pass the final answer only"));
      }
      // Only a trailing assistant turn without a generation prompt (training) ends in
      // <|return|>; history turns end in <|end|>, and their reasoning is dropped.
      const bool last_for_training = i + 1 == messages.size() && !options.add_generation_prompt;
      absl::StrAppend(&out, "<|start|>assistant<|channel|>final<|message|>", m.content,
                      last_for_training ? "<|return|>" : "<|end|>");
    } else if (m.role == "tool") {
      if (m.name.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ".name: a tool message needs the name of the tool it answers"));
      }
      absl::StrAppend(&out, "<|start|>functions.", m.name,
                      " to=assistant<|channel|>commentary<|message|>", JsonQuote(m.content),
                      "<|end|>");
    } else if (m.role == "system" || m.role == "developer") {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ".role: \"", m.role, "\" is only accepted as the first message for this model"));
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ".role: unknown role \"", m.role,
          "\" (expected system, developer, user, assistant or tool)"));
    }
  }
  if (options.add_generation_prompt) out += "<|start|>assistant";
  return out;
}

std::unique_ptr<ChatOutputParser> HarmonyChatTemplate::NewParser() const {
  return std::make_unique<HarmonyOutputParser>(tok_, tokens_);
}

}  // namespace mxserve
