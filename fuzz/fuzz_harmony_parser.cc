// libFuzzer target: the harmony output parser (coordinator/chat/harmony_output_parser.cc) on
// whatever token stream a model might write, as every chat completion's output passes through
// it. The first byte picks the turn: bits 0-1 the forced tool_choice (none, required, the named
// function "get_weather", none), bit 2 how the rest is read: as text with the special tokens
// spelled out (tokenized with them allowed: well-formed harmony is easy to reach from seeds), or
// as 16-bit token ids (from 0xF000 up one of the seven harmony specials, else an id modulo the
// vocabulary: any sequence the sampler could produce). The stream is pushed token by token and
// finished. Asserts what the front doors rely on for each streamed delta: content, reasoning and
// tool-call arguments are valid UTF-8 (each delta is a separate SSE chunk, so a character split
// across two would reach the client as two U+FFFD); tool calls are numbered 0, 1, ... in order
// of appearance, and a call's name comes only on its first piece.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "coordinator/chat/chat_template.h"
#include "coordinator/tokenizer/utf8.h"
#include "fuzz/serving_env.h"

namespace {

// The seven harmony special tokens' ids.
std::vector<int32_t> SpecialIds(const mxserve::Tokenizer& tok) {
  std::vector<int32_t> ids;
  for (const char* t : {"<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>",
                        "<|return|>", "<|call|>"}) {
    auto id = tok.SpecialTokenId(t);
    if (!id) abort();
    ids.push_back(*id);
  }
  return ids;
}

// Checks one delta against the calls seen so far (`calls`: how many have started).
void CheckDelta(const mxserve::ChatOutputParser::Delta& d, int* calls) {
  if (!mxserve::IsValidUtf8(d.content) || !mxserve::IsValidUtf8(d.reasoning)) abort();
  for (const auto& c : d.tool_calls) {
    if (!mxserve::IsValidUtf8(c.arguments)) abort();
    if (c.index == *calls) {
      ++*calls;  // a new call: its first piece (the name may be empty: "to=functions.")
    } else if (c.index < 0 || c.index != *calls - 1 || !c.name.empty()) {
      abort();  // only the newest call continues, and without its name
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static mxserve::fuzz::Env* env = mxserve::fuzz::MakeEnv();
  static const std::vector<int32_t> specials = SpecialIds(*env->tok);
  if (size < 1) return 0;
  mxserve::ChatRenderOptions options;
  const char* forced[] = {"", "*", "get_weather", ""};
  options.forced_tool = forced[data[0] & 3];
  std::vector<int32_t> ids;
  if (data[0] & 4) {
    const int vocab = env->tok->vocab_size();
    for (size_t i = 1; i + 1 < size; i += 2) {
      const int v = data[i] | (data[i + 1] << 8);
      ids.push_back(v >= 0xF000 ? specials[v % specials.size()] : v % vocab);
    }
  } else {
    ids = env->tok->Encode(std::string(reinterpret_cast<const char*>(data + 1), size - 1),
                           /*allow_special=*/true);
  }
  std::unique_ptr<mxserve::ChatOutputParser> parser = env->chat->NewParserFor(options);
  int calls = 0;
  for (int32_t id : ids) CheckDelta(parser->Push(id), &calls);
  CheckDelta(parser->Finish(), &calls);
  return 0;
}
