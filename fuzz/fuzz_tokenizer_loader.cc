// libFuzzer target: the tokenizer loaders, which read a model folder's files at startup
// (Tokenizer::FromJson for tokenizer.json, Tokenizer::FromTiktokenData for a tiktoken ranks
// file as Kimi ships). The first byte picks what the rest is: 0, a tiktoken ranks file alone; 1,
// lines appended to the tiny model's own ranks file (a valid start, so acceptance is reached);
// 2, a tokenizer.json; 3, a tokenizer.json with the tiny model's tokenizer_config.json. A file
// is either refused with an error or gives a tokenizer that works: Encode yields ids inside
// vocab_size, decoding them never fails, and a tiktoken tokenizer (all 256 bytes are tokens) is
// lossless on the input text.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "coordinator/tokenizer/byte_unicode.h"
#include "coordinator/tokenizer/regex_splitter.h"
#include "coordinator/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "tools/tiny_tokenizer/tiny_tokenizer.h"

namespace {

struct Tiny {
  std::string ranks;       // "base64 rank" lines of the tiny model's byte-level vocab
  std::string config_json;
};

Tiny* MakeTiny() {
  auto files = mxserve::MakeTinyTokenizer(40);
  if (!files.ok()) abort();
  auto* t = new Tiny();
  t->config_json = files->tokenizer_config_json;
  const nlohmann::json tj = nlohmann::json::parse(files->tokenizer_json);
  std::map<int32_t, std::string> by_id;
  for (auto it = tj["model"]["vocab"].begin(); it != tj["model"]["vocab"].end(); ++it) {
    auto bytes = mxserve::ByteLevelToBytes(it.key());
    if (!bytes.ok()) abort();
    by_id[it.value().get<int32_t>()] = *bytes;
  }
  for (const auto& [id, bytes] : by_id) t->ranks += absl::StrCat(absl::Base64Escape(bytes), " ", id, "\n");
  return t;
}

void CheckWorks(const mxserve::Tokenizer& tok, std::string_view text, bool lossless) {
  const int vocab = tok.vocab_size();
  if (vocab <= 0) abort();
  for (bool special : {false, true}) {
    const std::vector<int32_t> ids = tok.Encode(text, special);
    for (int32_t id : ids) {
      if (id < 0 || id >= vocab) abort();
    }
    auto bytes = tok.DecodeBytes(ids, /*skip_special=*/false);
    if (!bytes.ok()) abort();
    if (lossless && !special && *bytes != text) abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Tiny* tiny = MakeTiny();
  if (size < 1) return 0;
  const std::string rest(reinterpret_cast<const char*>(data + 1), size - 1);
  const std::string sample = "Hello, world! 你好 😀 <|start|>x";
  switch (data[0] % 4) {
    case 0:
    case 1: {
      const std::string ranks = data[0] % 4 == 0 ? rest : tiny->ranks + rest;
      auto tok = mxserve::Tokenizer::FromTiktokenData(ranks, mxserve::kO200kPattern,
                                                      {{"<|start|>", 300}, {"<|end|>", 301}});
      if (tok.ok()) {
        CheckWorks(**tok, sample, true);
        CheckWorks(**tok, rest, true);
      }
      break;
    }
    case 2:
    case 3: {
      auto tok = mxserve::Tokenizer::FromJson(rest, data[0] % 4 == 3 ? tiny->config_json : "");
      if (tok.ok()) {
        CheckWorks(**tok, sample, false);
        CheckWorks(**tok, rest, false);
      }
      break;
    }
  }
  return 0;
}
