#include "coordinator/tokenizer/tiktoken_converter.h"

#include <functional>

#include <algorithm>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "coordinator/tokenizer/byte_unicode.h"
#include "core/status.h"
#include "nlohmann/json.hpp"

namespace mxserve {

using ojson = nlohmann::ordered_json;

absl::Status ForEachTiktokenRank(
    std::string_view data,
    const std::function<absl::Status(size_t line_no, std::string bytes, int32_t rank)>& fn) {
  size_t pos = 0, line_no = 0;
  while (pos < data.size()) {
    size_t e = data.find('\n', pos);
    if (e == std::string_view::npos) e = data.size();
    std::string_view line = data.substr(pos, e - pos);
    pos = e + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    size_t sp = line.find(' ');
    std::string bytes;
    int32_t rank = 0;
    if (sp == std::string_view::npos ||
        !absl::Base64Unescape(absl::string_view(line.data(), sp), &bytes) ||
        !absl::SimpleAtoi(absl::string_view(line.data() + sp + 1, line.size() - sp - 1), &rank) ||
        rank < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tiktoken ranks line ", line_no, ": expected \"base64 rank\""));
    }
    RETURN_IF_ERROR(fn(line_no, std::move(bytes), rank));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ParseTiktokenRanks(std::string_view data) {
  std::vector<std::string> tokens;
  RETURN_IF_ERROR(ForEachTiktokenRank(
      data, [&](size_t line_no, std::string bytes, int32_t rank) -> absl::Status {
        if (static_cast<size_t>(rank) != tokens.size()) {
          return absl::InvalidArgumentError(absl::StrCat("tiktoken ranks line ", line_no,
                                                         ": rank ", rank, " where ",
                                                         tokens.size(), " was due"));
        }
        tokens.push_back(std::move(bytes));
        return absl::OkStatus();
      }));
  return tokens;
}

absl::StatusOr<std::string> TikTokenConverterJson(const std::vector<std::string>& tokens,
                                                  const std::string& pattern,
                                                  const std::vector<AddedToken>& added) {
  absl::flat_hash_map<std::string, int32_t> rank;
  rank.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (!rank.try_emplace(tokens[i], static_cast<int32_t>(i)).second)
      return absl::InvalidArgumentError(absl::StrCat("token ", i, " duplicates an earlier one"));
  }
  std::vector<std::string> spelled(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) spelled[i] = BytesToByteLevel(tokens[i]);
  auto quote = [](const std::string& s) { return ojson(s).dump(); };

  // Hand-serialized: an ordered_json object of 200k keys inserts in quadratic time.
  std::string vocab = "{";
  std::string merges = "[";
  bool first_merge = true;
  for (size_t i = 0; i < tokens.size(); ++i) {
    absl::StrAppend(&vocab, i ? ",\n      " : "\n      ", quote(spelled[i]), ": ", i);
    const std::string& t = tokens[i];
    std::vector<std::pair<int32_t, int32_t>> local;
    for (size_t k = 1; k < t.size(); ++k) {
      auto l = rank.find(absl::string_view(t.data(), k));
      auto r = rank.find(absl::string_view(t.data() + k, t.size() - k));
      if (l != rank.end() && r != rank.end()) local.push_back({l->second, r->second});
    }
    std::sort(local.begin(), local.end());
    for (auto [l, r] : local) {
      absl::StrAppend(&merges, first_merge ? "\n      [" : ",\n      [", quote(spelled[l]), ", ",
                      quote(spelled[r]), "]");
      first_merge = false;
    }
  }
  vocab += "\n    }";
  merges += "\n    ]";

  ojson at = ojson::array();
  for (const AddedToken& t : added) {
    at.push_back(ojson{{"id", t.id},         {"content", t.content}, {"single_word", false},
                       {"lstrip", false},    {"rstrip", false},      {"normalized", false},
                       {"special", t.special}});
  }
  ojson tj;
  tj["version"] = "1.0";
  tj["truncation"] = nullptr;
  tj["padding"] = nullptr;
  tj["added_tokens"] = at;
  tj["normalizer"] = nullptr;
  tj["pre_tokenizer"] = ojson{
      {"type", "Sequence"},
      {"pretokenizers",
       ojson::array({ojson{{"type", "Split"},
                           {"pattern", ojson{{"Regex", pattern}}},
                           {"behavior", "Isolated"},
                           {"invert", false}},
                     ojson{{"type", "ByteLevel"},
                           {"add_prefix_space", false},
                           {"trim_offsets", true},
                           {"use_regex", false}}})}};
  tj["post_processor"] = ojson{{"type", "ByteLevel"},
                               {"add_prefix_space", true},
                               {"trim_offsets", false},
                               {"use_regex", true}};
  tj["decoder"] = ojson{{"type", "ByteLevel"},
                        {"add_prefix_space", true},
                        {"trim_offsets", true},
                        {"use_regex", true}};
  tj["model"] = ojson{{"type", "BPE"},
                      {"dropout", nullptr},
                      {"unk_token", nullptr},
                      {"continuing_subword_prefix", nullptr},
                      {"end_of_word_suffix", nullptr},
                      {"fuse_unk", false},
                      {"byte_fallback", false},
                      {"ignore_merges", true},
                      {"vocab", "@@VOCAB@@"},
                      {"merges", "@@MERGES@@"}};
  std::string out = tj.dump(2);
  return absl::StrReplaceAll(out, {{"\"@@VOCAB@@\"", vocab}, {"\"@@MERGES@@\"", merges}});
}

}  // namespace mxserve
