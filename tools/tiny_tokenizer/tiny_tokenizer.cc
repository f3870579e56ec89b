// Trains the tiny byte-level BPE and writes it in the exact shape HF's TikTokenConverter gives
// gpt-oss (docs/MODELS.md), so the tiny model exercises the same loading path as a real one.
//
// Ids 0..255 are the 256 single bytes BY BYTE VALUE (id b = byte b; o200k orders them in GPT-2's
// byte-unicode order instead, which no code may rely on). Merged tokens follow in the order they
// were learned, so an id is also its tiktoken rank. The 21 harmony specials follow the base vocab
// in o200k_harmony's relative layout (base+0 = <|startoftext|> like 199998, base+4 = <|return|>
// like 200002, ...), then <|reserved_ID|> fill up to a multiple of 32. Reserved names carry their
// own id.
#include "tools/tiny_tokenizer/tiny_tokenizer.h"

#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/tokenizer/regex_splitter.h"
#include "coordinator/tokenizer/tiktoken_converter.h"
#include "nlohmann/json.hpp"
#include "tools/tiny_tokenizer/tiny_corpus.h"

namespace mxserve {
namespace {

using ojson = nlohmann::ordered_json;

constexpr int kNumHarmonySpecials = 21;

// Name of special number i (0-based after the base vocab) in o200k_harmony's layout.
std::string SpecialName(int i, int id) {
  switch (i) {
    case 0: return "<|startoftext|>";
    case 1: return "<|endoftext|>";
    case 4: return "<|return|>";
    case 5: return "<|constrain|>";
    case 7: return "<|channel|>";
    case 8: return "<|start|>";
    case 9: return "<|end|>";
    case 10: return "<|message|>";
    case 14: return "<|call|>";
    case 20: return "<|endofprompt|>";
    default: return absl::StrCat("<|reserved_", id, "|>");
  }
}

// Deterministic BPE training: most frequent adjacent pair first, ties to the smallest (left id,
// right id). Returns the token byte strings in id order.
absl::StatusOr<std::vector<std::string>> Train(int num_merges) {
  auto splitter_or = RegexSplitter::Create(kO200kPattern);
  if (!splitter_or.ok()) return splitter_or.status();
  std::vector<std::string_view> pieces;
  (*splitter_or)->Split(TinyTokenizerCorpus(), &pieces);
  std::map<std::string_view, long> piece_count;
  for (auto p : pieces) ++piece_count[p];

  struct Word {
    std::vector<int> ids;
    long count;
  };
  std::vector<Word> words;
  for (const auto& [p, n] : piece_count) {
    Word w{{}, n};
    for (unsigned char c : p) w.ids.push_back(c);
    words.push_back(std::move(w));
  }
  std::vector<std::string> tokens(256);
  std::map<std::string, int> index;
  for (int b = 0; b < 256; ++b) {
    tokens[b] = std::string(1, static_cast<char>(b));
    index[tokens[b]] = b;
  }
  int learned = 0;
  while (learned < num_merges) {
    std::map<std::pair<int, int>, long> pairs;
    for (const Word& w : words)
      for (size_t i = 0; i + 1 < w.ids.size(); ++i) pairs[{w.ids[i], w.ids[i + 1]}] += w.count;
    if (pairs.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "num_merges ", num_merges, " is more than the built-in corpus supports (", learned,
          ")"));
    }
    auto best = pairs.begin();
    for (auto it = pairs.begin(); it != pairs.end(); ++it)
      if (it->second > best->second) best = it;
    auto [a, b] = best->first;
    std::string merged = tokens[a] + tokens[b];
    int id;
    if (auto it = index.find(merged); it != index.end()) {
      id = it->second;  // same bytes reached by another split: reuse, learn nothing new
    } else {
      id = static_cast<int>(tokens.size());
      tokens.push_back(merged);
      index[merged] = id;
      ++learned;
    }
    for (Word& w : words) {
      std::vector<int> out;
      out.reserve(w.ids.size());
      for (size_t i = 0; i < w.ids.size(); ++i) {
        if (i + 1 < w.ids.size() && w.ids[i] == a && w.ids[i + 1] == b) {
          out.push_back(id);
          ++i;
        } else {
          out.push_back(w.ids[i]);
        }
      }
      w.ids = std::move(out);
    }
  }
  return tokens;
}

}  // namespace

absl::StatusOr<TokenizerFiles> MakeTinyTokenizer(int num_merges) {
  if (num_merges < 0 || num_merges > 100000) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_merges must be in [0, 100000], got ", num_merges));
  }
  auto tokens_or = Train(num_merges);
  if (!tokens_or.ok()) return tokens_or.status();
  const std::vector<std::string>& tokens = *tokens_or;
  const int base = static_cast<int>(tokens.size());
  const int vocab_size = (base + kNumHarmonySpecials + 31) / 32 * 32;

  std::vector<AddedToken> added;
  ojson added_decoder = ojson::object();
  for (int id = base; id < vocab_size; ++id) {
    const int i = id - base;
    std::string name = i < kNumHarmonySpecials ? SpecialName(i, id)
                                               : absl::StrCat("<|reserved_", id, "|>");
    added.push_back(AddedToken{id, name, true});
    added_decoder[std::to_string(id)] =
        ojson{{"content", name}, {"lstrip", false},      {"normalized", false},
              {"rstrip", false}, {"single_word", false}, {"special", true}};
  }
  auto tokenizer_json = TikTokenConverterJson(tokens, kO200kPattern, added);
  if (!tokenizer_json.ok()) return tokenizer_json.status();

  ojson cfg;
  cfg["added_tokens_decoder"] = added_decoder;
  cfg["bos_token"] = "<|startoftext|>";
  cfg["clean_up_tokenization_spaces"] = false;
  cfg["eos_token"] = "<|return|>";
  cfg["extra_special_tokens"] = ojson::object();
  cfg["model_input_names"] = ojson::array({"input_ids", "attention_mask"});
  cfg["model_max_length"] = 131072;
  cfg["pad_token"] = "<|endoftext|>";
  cfg["tokenizer_class"] = "PreTrainedTokenizerFast";

  TokenizerFiles f;
  f.tokenizer_json = std::move(*tokenizer_json);
  f.tokenizer_config_json = cfg.dump(2);
  f.vocab_size = vocab_size;
  f.eos_token_id = base + 4;
  f.pad_token_id = base + 1;
  return f;
}

}  // namespace mxserve
