// The Tokenizer implementation: added/special tokens matched first, then the pre-tokenizer regex
// chain, then byte-level BPE per piece. Built by the loaders (tokenizer_loader.cc) from a HF
// tokenizer.json or a tiktoken ranks file.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "coordinator/tokenizer/byte_pair_encoder.h"
#include "coordinator/tokenizer/regex_splitter.h"
#include "coordinator/tokenizer/tokenizer.h"

namespace mxserve {

struct AddedToken {
  int32_t id;
  std::string content;
  bool special;  // matched only with allow_special; skipped by skip_special
};

struct BpeTokenizerParts {
  BytePairEncoder bpe;
  // Applied in order, each to every piece the previous one produced (HF Sequence of Splits).
  std::vector<std::unique_ptr<RegexSplitter>> splitters;
  bool add_prefix_space = false;  // HF ByteLevel(add_prefix_space): " " before each text segment
  std::vector<AddedToken> added;
  std::optional<int32_t> bos, eos;
  // The add_special_tokens template: ids before and after the encoded text.
  std::vector<int32_t> prompt_prefix, prompt_suffix;
};

class BpeTokenizer : public Tokenizer {
 public:
  static absl::StatusOr<std::unique_ptr<BpeTokenizer>> Create(BpeTokenizerParts parts);

  std::vector<int32_t> Encode(std::string_view text, bool allow_special) const override;
  std::vector<int32_t> EncodeOrdinary(std::string_view text) const override;
  std::vector<int32_t> EncodePrompt(std::string_view text, bool add_special_tokens) const override;
  absl::StatusOr<std::string> DecodeBytes(std::span<const int32_t> ids,
                                          bool skip_special) const override;
  absl::StatusOr<std::string> Decode(std::span<const int32_t> ids,
                                     bool skip_special) const override;
  std::string TokenString(int32_t id) const override;
  int vocab_size() const override { return static_cast<int>(bytes_.size()); }
  std::optional<int32_t> SpecialTokenId(std::string_view content) const override;
  bool IsSpecial(int32_t id) const override;
  std::optional<int32_t> eos_token_id() const override { return eos_; }
  std::optional<int32_t> bos_token_id() const override { return bos_; }

  // Encoding of text with no added-token matching at all.
  void EncodeOrdinary(std::string_view text, std::vector<int32_t>* out) const;
  const BytePairEncoder& bpe() const { return bpe_; }

 private:
  explicit BpeTokenizer(BpeTokenizerParts parts);

  BytePairEncoder bpe_;
  std::vector<std::unique_ptr<RegexSplitter>> splitters_;
  bool add_prefix_space_;
  std::vector<AddedToken> added_;       // longest content first
  std::vector<const AddedToken*> by_first_byte_[256];  // longest first
  absl::flat_hash_map<std::string, int32_t> by_content_;
  std::vector<std::string> bytes_;      // id -> bytes (added tokens: content)
  std::vector<uint8_t> kind_;           // id -> 0 none, 1 base, 2 added, 3 added special
  std::optional<int32_t> bos_, eos_;
  std::vector<int32_t> prompt_prefix_, prompt_suffix_;
};

}  // namespace mxserve
