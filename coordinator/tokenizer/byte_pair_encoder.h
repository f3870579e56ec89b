// Byte-level BPE on one pre-tokenizer piece. Two ways to rank a candidate merge of adjacent parts:
// by the vocab rank (id) of their concatenation, as tiktoken does (and HF with ignore_merges for
// TikTokenConverter vocabularies), or by the index of the pair in HF "merges". Either way the
// lowest-ranked adjacent pair is merged first, leftmost on ties.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace mxserve {

class BytePairEncoder {
 public:
  // vocab: raw token bytes -> id; must hold all 256 single bytes.
  // merges: empty = rank mode (a piece found whole in the vocab is emitted as is, then merges
  // are ranked by the concatenation's id); else HF merges mode (pair of ids, ranked by index).
  static absl::StatusOr<BytePairEncoder> Create(
      absl::flat_hash_map<std::string, int32_t> vocab,
      const std::vector<std::pair<int32_t, int32_t>>& merges);

  // Appends the ids of `piece` to `out`.
  void Encode(std::string_view piece, std::vector<int32_t>* out) const;

  const absl::flat_hash_map<std::string, int32_t>& vocab() const { return vocab_; }
  // Pieces up to this many bytes use the simple quadratic loop; longer ones a heap.
  static constexpr size_t kSmallPiece = 64;
  // For tests: force one strategy.
  void EncodeWithHeap(std::string_view piece, std::vector<int32_t>* out) const;
  void EncodeQuadratic(std::string_view piece, std::vector<int32_t>* out) const;

 private:
  struct Rank {
    uint32_t rank;  // kNone when the pair does not merge
    int32_t id;     // the merged token
  };
  static constexpr uint32_t kNone = 0xFFFFFFFFu;
  Rank PairRank(std::string_view piece, size_t start, size_t end, int32_t left,
                int32_t right) const;

  absl::flat_hash_map<std::string, int32_t> vocab_;
  absl::flat_hash_map<uint64_t, Rank> merges_;  // (left << 32 | right) -> rank, merged id
  bool rank_mode_ = true;
  int32_t byte_id_[256] = {};
};

}  // namespace mxserve
