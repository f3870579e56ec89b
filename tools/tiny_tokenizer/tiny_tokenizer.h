// The tiny model's own tokenizer: a byte-level BPE trained at build time on a small built-in
// corpus (deterministic), in HF tokenizer.json form, with gpt-oss's harmony special tokens.
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace mxserve {

struct TokenizerFiles {
  std::string tokenizer_json;         // HF tokenizer.json text
  std::string tokenizer_config_json;  // HF tokenizer_config.json text (bos/eos/pad, chat template name)
  int vocab_size = 0;                 // base vocab + specials + reserved: the model's vocab_size
  int eos_token_id = 0;               // <|return|>
  int pad_token_id = 0;               // <|endoftext|>
};

// num_merges: how many BPE merges to learn on top of the 256 byte tokens (ids 0..255 = byte
// value; the built-in corpus supports up to ~1000 merges, more is an InvalidArgument error).
// Deterministic: the same num_merges always gives the same files. See tiny_tokenizer.cc for the
// id layout of the harmony specials.
absl::StatusOr<TokenizerFiles> MakeTinyTokenizer(int num_merges);

}  // namespace mxserve
