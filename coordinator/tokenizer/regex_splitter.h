// Pre-tokenizer regex (tiktoken / HF Split "Isolated"): cuts text into pieces that BPE encodes
// independently. PCRE2 with UTF + UCP (JIT when available) and PCRE2_MATCH_INVALID_UTF, so any
// byte string is accepted: bytes no match covers (e.g. invalid UTF-8) become pieces of their own.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace mxserve {

// The o200k_base pattern (tiktoken_ext/openai_public.py), as tiktoken and gpt-oss's tokenizer.json have it.
extern const char kO200kPattern[];
// GPT-2's pattern (HF ByteLevel pre-tokenizer with use_regex true).
extern const char kGpt2Pattern[];
// Kimi K2's pattern (tokenization_kimi.py; docs/MODELS.md), in Rust-regex syntax.
extern const char kKimiPattern[];

class RegexSplitter {
 public:
  // `pattern` in the Rust-regex / Oniguruma dialect tokenizers use; rewritten where PCRE2 differs
  // (\s also matches U+0085 there; Rust's class intersection `[A&&[^B]]` becomes a lookahead).
  static absl::StatusOr<std::unique_ptr<RegexSplitter>> Create(const std::string& pattern);
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  // Appends the pieces of `text` to `out`, in order; their concatenation is `text`. Thread-safe.
  void Split(std::string_view text, std::vector<std::string_view>* out) const;

  // The PCRE2 form of a tokenizer pattern (exposed for tests).
  static std::string TranslatePattern(const std::string& pattern);

 private:
  RegexSplitter() = default;
  struct Impl;
  Impl* impl_ = nullptr;
};

}  // namespace mxserve
