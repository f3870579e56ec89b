// HF tokenizer.json from tiktoken ranks, the way transformers' TikTokenConverter builds gpt-oss's
// (transformers' convert_slow_tokenizer.py): vocab = byte-level spelling -> rank, merges derived from the ranks,
// ignore_merges true, Split(pattern, Isolated) + ByteLevel(use_regex false). Used by the tiny
// tokenizer and by the o200k_harmony exactness test, which builds the 13 MB file at test time.
#pragma once

#include <functional>

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/tokenizer/bpe_tokenizer.h"

namespace mxserve {

// tokens[rank] = the token's bytes. added: special tokens, in id order.
absl::StatusOr<std::string> TikTokenConverterJson(const std::vector<std::string>& tokens,
                                                  const std::string& pattern,
                                                  const std::vector<AddedToken>& added);

// Calls fn for each "base64 rank" line of a tiktoken ranks file (blank lines skipped, \r\n
// accepted); a malformed line is InvalidArgument naming its number. fn's error stops the walk.
absl::Status ForEachTiktokenRank(
    std::string_view data,
    const std::function<absl::Status(size_t line_no, std::string bytes, int32_t rank)>& fn);

// Reads "base64 rank" lines into tokens[rank]; ranks must be 0..n-1 without gaps.
absl::StatusOr<std::vector<std::string>> ParseTiktokenRanks(std::string_view data);

}  // namespace mxserve
