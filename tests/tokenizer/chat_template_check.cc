// Exactness of the Kimi and DeepSeek-V3 chat templates against the models' published Jinja
// templates: each case of a JSONL file written by tests/client/chat/gen_chat_cases.mjs holds
// OpenAI messages, tools, add_generation_prompt and the text @huggingface/jinja rendered; the
// template ForModel picks must render the same bytes. RenderIds must decode back to that text,
// and equal the whole text's encoding (specials recognized) unless request text spells a marker.
// Usage: chat_template_check MODEL_TYPE TOKENIZER_DIR|kimi CASES_JSONL    exit 0 = all match
// ("kimi": Kimi's special tokens at their ids over a byte-level vocabulary, built here).
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "coordinator/chat/chat_template.h"
#include "coordinator/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace {

using json = nlohmann::ordered_json;  // key order matters: the templates keep it

absl::StatusOr<std::unique_ptr<mxserve::Tokenizer>> KimiBytes() {
  std::string ranks;
  for (int b = 0; b < 256; ++b) {
    ranks += absl::Base64Escape(std::string(1, static_cast<char>(b))) + " " + std::to_string(b) + "\n";
  }
  const std::vector<std::pair<std::string, int32_t>> specials = {
      {"[BOS]", 163584}, {"[EOS]", 163585}, {"<|im_end|>", 163586}, {"<|im_user|>", 163587},
      {"<|im_assistant|>", 163588}, {"<|im_system|>", 163594},
      {"<|tool_calls_section_begin|>", 163595}, {"<|tool_calls_section_end|>", 163596},
      {"<|tool_call_begin|>", 163597}, {"<|tool_call_argument_begin|>", 163598},
      {"<|tool_call_end|>", 163599}, {"<|im_middle|>", 163601}};
  return mxserve::Tokenizer::FromTiktokenData(ranks, "[\\s\\S]", specials, "[BOS]", "[EOS]");
}

mxserve::ChatMessage ToMessage(const json& m) {
  mxserve::ChatMessage cm;
  cm.role = m.at("role").get<std::string>();
  if (m.contains("content") && m["content"].is_string()) cm.content = m["content"].get<std::string>();
  if (m.contains("name")) cm.name = m["name"].get<std::string>();
  if (m.contains("tool_calls")) cm.tool_calls_json = m["tool_calls"].dump();
  if (m.contains("tool_call_id")) cm.tool_call_id = m["tool_call_id"].get<std::string>();
  return cm;
}

std::string Quote(const std::string& s) {
  return json(s).dump(-1, ' ', false, json::error_handler_t::replace);
}

// Where two strings first differ, with some context of each.
void ShowDiff(const std::string& got, const std::string& want) {
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  const size_t from = i > 60 ? i - 60 : 0;
  std::printf("  first difference at byte %zu\n  ours %s\n  want %s\n", i,
              Quote(got.substr(from, 160)).c_str(), Quote(want.substr(from, 160)).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s MODEL_TYPE TOKENIZER_DIR|kimi CASES_JSONL\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[2];
  auto tok = dir == "kimi" ? KimiBytes() : mxserve::Tokenizer::FromDir(dir);
  if (!tok.ok()) {
    std::fprintf(stderr, "tokenizer: %s\n", tok.status().ToString().c_str());
    return 1;
  }
  auto tmpl = mxserve::ChatTemplate::ForModel(argv[1], tok->get());
  if (!tmpl.ok()) {
    std::fprintf(stderr, "ForModel: %s\n", tmpl.status().ToString().c_str());
    return 1;
  }
  std::ifstream in(argv[3]);
  std::string line;
  int cases = 0, failures = 0, id_checks = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const json c = json::parse(line);
    ++cases;
    std::vector<mxserve::ChatMessage> messages;
    for (const json& m : c.at("messages")) messages.push_back(ToMessage(m));
    mxserve::ChatRenderOptions o;
    o.add_generation_prompt = c.at("add_generation_prompt").get<bool>();
    if (c.contains("tools")) o.tools_json = c["tools"].dump();
    const std::string want = c.at("expected").get<std::string>();
    auto got = (*tmpl)->Render(messages, o);
    auto ids = (*tmpl)->RenderIds(messages, o);
    if (!got.ok() || !ids.ok()) {
      if (++failures <= 10) {
        std::printf("case %d: %s\n", cases, (got.ok() ? ids.status() : got.status()).ToString().c_str());
      }
      continue;
    }
    if (*got != want) {
      if (++failures <= 10) {
        std::printf("case %d (%s): rendering differs\n", cases, c.value("kind", "").c_str());
        ShowDiff(*got, want);
      }
      continue;
    }
    auto back = (*tok)->DecodeBytes(*ids, /*skip_special=*/false);
    if (!back.ok() || *back != want) {
      if (++failures <= 10) std::printf("case %d: RenderIds does not decode to the text\n", cases);
      continue;
    }
    if (!c.value("content_spells_marker", true)) {
      ++id_checks;
      if (*ids != (*tok)->Encode(want, /*allow_special=*/true)) {
        if (++failures <= 10) std::printf("case %d: RenderIds differs from Encode(text)\n", cases);
      }
    }
  }
  std::printf("%s: %d cases, %d id checks, %d failures\n", argv[1], cases, id_checks, failures);
  return cases > 0 && failures == 0 ? 0 : 1;
}
