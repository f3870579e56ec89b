#include "coordinator/grammar/vocab_trie.h"

#include <algorithm>
#include <numeric>
#include <utility>

namespace mxserve::grammar {

std::unique_ptr<VocabTrie> VocabTrie::Build(const Tokenizer& tokenizer, int mask_size,
                                            std::vector<int32_t> eos_ids) {
  const int n = std::min(tokenizer.vocab_size(), mask_size);
  std::vector<std::string> tokens(n);
  for (int32_t id = 0; id < n; ++id) {
    if (tokenizer.IsSpecial(id)) continue;
    const int32_t one[1] = {id};
    auto bytes = tokenizer.DecodeBytes(one, /*skip_special=*/false);
    if (bytes.ok()) tokens[id] = *std::move(bytes);
  }
  return FromTokens(tokens, mask_size, std::move(eos_ids));
}

std::unique_ptr<VocabTrie> VocabTrie::FromTokens(const std::vector<std::string>& tokens,
                                                 int mask_size, std::vector<int32_t> eos_ids) {
  auto trie = std::unique_ptr<VocabTrie>(new VocabTrie());
  trie->mask_size_ = mask_size;
  trie->eos_ids_ = std::move(eos_ids);
  std::vector<int32_t> order;
  for (int32_t id = 0; id < static_cast<int32_t>(tokens.size()) && id < mask_size; ++id) {
    if (!tokens[id].empty()) order.push_back(id);
  }
  // Sorted byte strings list the trie in preorder: a node is the first string with its prefix.
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return tokens[a] < tokens[b] || (tokens[a] == tokens[b] && a < b);
  });
  std::vector<int32_t> path;  // node index per depth of the current string
  std::string prev;
  for (int32_t id : order) {
    const std::string& t = tokens[id];
    size_t common = 0;
    while (common < prev.size() && common < t.size() && prev[common] == t[common]) ++common;
    path.resize(common);
    for (size_t d = common; d < t.size(); ++d) {
      path.push_back(static_cast<int32_t>(trie->byte_.size()));
      trie->byte_.push_back(static_cast<uint8_t>(t[d]));
      trie->depth_.push_back(static_cast<int32_t>(d + 1));
      trie->token_start_.push_back(0);
    }
    ++trie->token_start_[path.back()];  // counts for now
    trie->token_ids_.push_back(id);
    prev = t;
    trie->max_depth_ = std::max<int>(trie->max_depth_, static_cast<int>(t.size()));
  }
  const int nodes = trie->num_nodes();
  // Counts to offsets (tokens were appended in preorder of their end nodes).
  int32_t sum = 0;
  for (int i = 0; i < nodes; ++i) {
    const int32_t c = trie->token_start_[i];
    trie->token_start_[i] = sum;
    sum += c;
  }
  trie->token_start_.push_back(sum);
  // Subtree ends: the next node at the same or a smaller depth.
  trie->end_.assign(nodes, nodes);
  std::vector<int32_t> open;
  for (int i = 0; i < nodes; ++i) {
    while (!open.empty() && trie->depth_[open.back()] >= trie->depth_[i]) {
      trie->end_[open.back()] = i;
      open.pop_back();
    }
    open.push_back(i);
  }
  return trie;
}

}  // namespace mxserve::grammar
