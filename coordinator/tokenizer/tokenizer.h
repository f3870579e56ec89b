// Byte-level BPE tokenizer loaded from a HF tokenizer.json (GPT-2 byte<->unicode map, rank-based
// merging as tiktoken does: per pre-token piece, repeatedly merge the adjacent pair whose
// concatenation has the lowest vocab rank; docs/MODELS.md), pre-tokenizer regex via PCRE2,
// added/special tokens from "added_tokens".
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace mxserve {

class Tokenizer {
 public:
  // Reads tokenizer.json (and tokenizer_config.json when present, for bos/eos names and
  // add_bos_token/add_eos_token); without tokenizer.json, Kimi's tiktoken.model with
  // tokenizer_config.json (specials from added_tokens_decoder) and Kimi's split pattern.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromDir(const std::string& model_dir);
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromJson(const std::string& tokenizer_json,
                                                             const std::string& config_json);
  // A tiktoken ranks file ("base64(token) rank" per line: o200k_base.tiktoken, Kimi's
  // tiktoken.model) with its pre-tokenizer pattern and special tokens (content, id); rank-BPE.
  // bos/eos name specials ("" = none).
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromTiktoken(
      const std::string& ranks_path, const std::string& pattern,
      const std::vector<std::pair<std::string, int32_t>>& specials,
      const std::string& bos_token = "", const std::string& eos_token = "");
  // The same from the file's contents.
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromTiktokenData(
      std::string_view ranks, const std::string& pattern,
      const std::vector<std::pair<std::string, int32_t>>& specials,
      const std::string& bos_token = "", const std::string& eos_token = "");
  virtual ~Tokenizer() = default;

  // allow_special: text equal to a special token's content becomes that token; otherwise
  // special-token text is encoded as ordinary text.
  virtual std::vector<int32_t> Encode(std::string_view text, bool allow_special) const = 0;
  // Text as ordinary text only: no added token is recognized, special or not (tiktoken's
  // encode(text, disallowed_special=())); Encode(text, false) still splits off added tokens
  // marked "special": false, as HF does.
  virtual std::vector<int32_t> EncodeOrdinary(std::string_view text) const {
    return Encode(text, /*allow_special=*/false);
  }
  // A text prompt as vLLM's /tokenize and completions encode it: special-token strings are
  // recognized either way; add_special_tokens adds the model's BOS/EOS template only.
  virtual std::vector<int32_t> EncodePrompt(std::string_view text, bool add_special_tokens) const {
    (void)add_special_tokens;
    return Encode(text, /*allow_special=*/true);
  }
  // Bytes of the tokens concatenated (may end in a partial UTF-8 sequence). Error on an id
  // outside the vocabulary (naming it).
  virtual absl::StatusOr<std::string> DecodeBytes(std::span<const int32_t> ids,
                                                  bool skip_special) const = 0;
  // DecodeBytes, with invalid UTF-8 replaced by U+FFFD.
  virtual absl::StatusOr<std::string> Decode(std::span<const int32_t> ids,
                                             bool skip_special) const = 0;
  // The token's display string (its bytes, lossily as UTF-8), for logprobs.
  virtual std::string TokenString(int32_t id) const = 0;

  virtual int vocab_size() const = 0;  // 1 + the largest id (base + added)
  virtual std::optional<int32_t> SpecialTokenId(std::string_view content) const = 0;
  virtual bool IsSpecial(int32_t id) const = 0;
  virtual std::optional<int32_t> eos_token_id() const = 0;
  virtual std::optional<int32_t> bos_token_id() const = 0;
};

// Turns a token stream into text deltas that never split a UTF-8 character: bytes of an
// incomplete sequence are held back until completed; invalid sequences become U+FFFD.
class IncrementalDetokenizer {
 public:
  IncrementalDetokenizer(const Tokenizer* tok, bool skip_special);
  // Returns the newly completed text (possibly empty).
  std::string Push(int32_t id);
  // At the end of the stream: whatever is held back, with invalid bytes as U+FFFD.
  std::string Flush();

 private:
  const Tokenizer* tok_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace mxserve
