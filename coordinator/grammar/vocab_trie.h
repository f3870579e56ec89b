// VocabTrie: the byte strings of a tokenizer's ordinary tokens as a trie laid out in preorder
// (node i's subtree is [i, end[i])), so a walk can skip a dead subtree with one jump. Special
// tokens are left out (a grammar never allows them); the EOS ids ride along for the masks.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "coordinator/tokenizer/tokenizer.h"

namespace mxserve::grammar {

class VocabTrie {
 public:
  // Tokens [0, min(tokenizer vocab, mask_size)) that are not special and decode to at least
  // one byte. mask_size is the width of the masks (the model's vocabulary).
  static std::unique_ptr<VocabTrie> Build(const Tokenizer& tokenizer, int mask_size,
                                          std::vector<int32_t> eos_ids);
  // The same from explicit token byte strings (index = id; "" = never allowed).
  static std::unique_ptr<VocabTrie> FromTokens(const std::vector<std::string>& tokens,
                                               int mask_size, std::vector<int32_t> eos_ids);

  int num_nodes() const { return static_cast<int>(byte_.size()); }
  uint8_t byte(int i) const { return byte_[i]; }
  int depth(int i) const { return depth_[i]; }  // 1 for a token's first byte
  int subtree_end(int i) const { return end_[i]; }
  // Token ids whose bytes end at node i.
  const int32_t* tokens_begin(int i) const { return token_ids_.data() + token_start_[i]; }
  const int32_t* tokens_end(int i) const { return token_ids_.data() + token_start_[i + 1]; }
  int max_depth() const { return max_depth_; }
  int mask_size() const { return mask_size_; }
  const std::vector<int32_t>& eos_ids() const { return eos_ids_; }

 private:
  std::vector<uint8_t> byte_;
  std::vector<int32_t> depth_, end_, token_start_, token_ids_;
  int max_depth_ = 0;
  int mask_size_ = 0;
  std::vector<int32_t> eos_ids_;
};

}  // namespace mxserve::grammar
