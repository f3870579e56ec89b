#include "coordinator/tokenizer/byte_pair_encoder.h"

#include <queue>

#include "absl/strings/str_cat.h"

namespace mxserve {

absl::StatusOr<BytePairEncoder> BytePairEncoder::Create(
    absl::flat_hash_map<std::string, int32_t> vocab,
    const std::vector<std::pair<int32_t, int32_t>>& merges) {
  BytePairEncoder e;
  e.vocab_ = std::move(vocab);
  for (int b = 0; b < 256; ++b) {
    auto it = e.vocab_.find(std::string(1, static_cast<char>(b)));
    if (it == e.vocab_.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("vocab has no token for byte 0x", absl::Hex(b, absl::kZeroPad2),
                       "; byte-level BPE needs all 256"));
    }
    e.byte_id_[b] = it->second;
  }
  if (!merges.empty()) {
    e.rank_mode_ = false;
    std::vector<std::string> bytes_of;  // id -> bytes, to find each merge's result
    int32_t max_id = 0;
    for (const auto& [s, id] : e.vocab_) max_id = std::max(max_id, id);
    bytes_of.resize(static_cast<size_t>(max_id) + 1);
    for (const auto& [s, id] : e.vocab_) {
      if (id < 0) return absl::InvalidArgumentError(absl::StrCat("negative vocab id ", id));
      bytes_of[id] = s;
    }
    for (size_t r = 0; r < merges.size(); ++r) {
      auto [a, b] = merges[r];
      auto it = e.vocab_.find(bytes_of[a] + bytes_of[b]);
      if (it == e.vocab_.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("merges[", r, "]: the merged token is not in the vocab"));
      }
      uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) |
                     static_cast<uint32_t>(b);
      e.merges_.try_emplace(key, Rank{static_cast<uint32_t>(r), it->second});
    }
  }
  return e;
}

BytePairEncoder::Rank BytePairEncoder::PairRank(std::string_view piece, size_t start, size_t end,
                                                int32_t left, int32_t right) const {
  if (rank_mode_) {
    auto it = vocab_.find(absl::string_view(piece.data() + start, end - start));
    if (it == vocab_.end()) return {kNone, -1};
    return {static_cast<uint32_t>(it->second), it->second};
  }
  uint64_t key =
      (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  auto it = merges_.find(key);
  if (it == merges_.end()) return {kNone, -1};
  return it->second;
}

void BytePairEncoder::Encode(std::string_view piece, std::vector<int32_t>* out) const {
  if (piece.empty()) return;
  if (piece.size() == 1) {
    out->push_back(byte_id_[static_cast<uint8_t>(piece[0])]);
    return;
  }
  if (rank_mode_) {
    auto it = vocab_.find(absl::string_view(piece.data(), piece.size()));
    if (it != vocab_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  if (piece.size() <= kSmallPiece) {
    EncodeQuadratic(piece, out);
  } else {
    EncodeWithHeap(piece, out);
  }
}

// tiktoken's loop: rescan for the lowest rank after every merge. Fastest for short pieces.
void BytePairEncoder::EncodeQuadratic(std::string_view piece, std::vector<int32_t>* out) const {
  const size_t n = piece.size();
  std::vector<size_t> start(n + 1);
  std::vector<int32_t> id(n);
  for (size_t i = 0; i < n; ++i) {
    start[i] = i;
    id[i] = byte_id_[static_cast<uint8_t>(piece[i])];
  }
  start[n] = n;
  std::vector<Rank> rank(n - 1);
  for (size_t i = 0; i + 1 < n; ++i) rank[i] = PairRank(piece, start[i], start[i + 2], id[i], id[i + 1]);
  size_t m = n;  // parts
  while (m > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < m; ++i)
      if (rank[i].rank < rank[best].rank) best = i;
    if (rank[best].rank == kNone) break;
    id[best] = rank[best].id;
    start.erase(start.begin() + best + 1);
    id.erase(id.begin() + best + 1);
    rank.erase(rank.begin() + best);
    --m;
    if (best + 1 < m)
      rank[best] = PairRank(piece, start[best], start[best + 2], id[best], id[best + 1]);
    if (best > 0)
      rank[best - 1] = PairRank(piece, start[best - 1], start[best + 1], id[best - 1], id[best]);
  }
  out->insert(out->end(), id.begin(), id.begin() + m);
}

// The same choices in O(n log n): a min-heap of (rank, position) with stale entries skipped.
void BytePairEncoder::EncodeWithHeap(std::string_view piece, std::vector<int32_t>* out) const {
  const int n = static_cast<int>(piece.size());
  std::vector<int> prev(n), next(n);
  std::vector<uint32_t> ver(n, 0);
  std::vector<size_t> start(n);
  std::vector<int32_t> id(n);
  for (int i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
    start[i] = i;
    id[i] = byte_id_[static_cast<uint8_t>(piece[i])];
  }
  auto end_of = [&](int i) { return next[i] < 0 ? piece.size() : start[next[i]]; };
  struct Entry {
    uint32_t rank;
    int left, right;
    uint32_t vl, vr;
    int32_t merged;
    bool operator>(const Entry& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;  // left index order = position order
    }
  };
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> heap;
  auto push = [&](int l) {
    int r = next[l];
    if (l < 0 || r < 0) return;
    Rank k = PairRank(piece, start[l], end_of(r), id[l], id[r]);
    if (k.rank != kNone) heap.push(Entry{k.rank, l, r, ver[l], ver[r], k.id});
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    Entry e = heap.top();
    heap.pop();
    if (ver[e.left] != e.vl || ver[e.right] != e.vr || next[e.left] != e.right) continue;
    int l = e.left, r = e.right;
    id[l] = e.merged;
    next[l] = next[r];
    if (next[r] >= 0) prev[next[r]] = l;
    ++ver[l];
    ++ver[r];
    if (prev[l] >= 0) push(prev[l]);
    push(l);
  }
  for (int i = 0; i >= 0; i = next[i]) out->push_back(id[i]);
}

}  // namespace mxserve
