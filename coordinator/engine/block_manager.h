// BlockManager: the fixed pool of KV-cache block ids the ModelRunner's cache holds, with
// reference counts so that full blocks of a shared prefix serve several sequences read-only
// (automatic prefix caching): a full, computed block is registered under a hash chain of its
// tokens; a sequence whose prompt starts with the same blocks takes them instead of computing.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace mxserve {

class BlockManager {
 public:
  // Hash of an empty chain (the parent of a sequence's first block).
  static constexpr uint64_t kRootHash = 0x6D78736572766531ull;
  // The key of a full block: its parent's key and its token ids. A block's KV depends on
  // nothing else today (one model per process, no adapters, no multimodal inputs, positions
  // follow from the block's index in the chain), so nothing else goes in.
  static uint64_t HashBlock(uint64_t parent, std::span<const int32_t> tokens);

  BlockManager(int num_blocks, int block_size, bool enable_prefix_caching = false);

  int block_size() const { return block_size_; }
  int num_blocks() const { return num_blocks_; }
  bool prefix_caching() const { return caching_; }
  // Blocks no sequence holds: never used, or cached ones kept for reuse (evicted on demand).
  int num_free_blocks() const {
    return static_cast<int>(free_.size() + evictable_.size());
  }
  int num_used_blocks() const { return num_blocks_ - num_free_blocks(); }
  int num_cached_blocks() const { return static_cast<int>(cached_.size()); }

  // Blocks needed to hold `num_tokens` positions.
  int BlocksFor(int num_tokens) const { return (num_tokens + block_size_ - 1) / block_size_; }

  // Whether `n` more blocks are free.
  bool CanAllocate(int n) const { return n <= num_free_blocks(); }
  // Takes `n` free blocks (caller checked CanAllocate) and appends them to `table`. Never-used
  // blocks go first, then cached ones, least recently used first (their cache entry is dropped).
  void Allocate(int n, std::vector<int32_t>* table);
  // Grows `table` so it covers positions [0, num_tokens). Returns false (and changes nothing)
  // when the pool has too few free blocks.
  bool AppendSlot(std::vector<int32_t>* table, int num_tokens);
  // Drops `table`'s hold on each of its blocks and clears it. A block no one holds is free
  // again; a cached one stays findable until evicted (the table's last blocks are evicted
  // first, as a later block is useless without the ones before it).
  void Free(std::vector<int32_t>* table);

  // Prefix caching. The cached blocks whose keys are `keys[0..]`, in order, stopping at the
  // first miss; `tokens` are the positions the keys cover (block i holds tokens[i * bs, ...)),
  // compared too, so that a hash collision cannot hand out another prefix's KV.
  std::vector<int32_t> FindCached(std::span<const uint64_t> keys,
                                  std::span<const int32_t> tokens) const;
  // How many of `ids` (from FindCached) no sequence holds now: taking them uses free blocks.
  int NumFree(std::span<const int32_t> ids) const;
  // Takes a hold on each of `ids` (from FindCached) and appends them to `table`.
  void Share(std::span<const int32_t> ids, std::vector<int32_t>* table);
  // Block `id` is full and its KV computed: makes it findable under `key`. A key that another
  // block already holds stays with that block (this one is then freed as an uncached block).
  void Register(int32_t id, uint64_t key, std::span<const int32_t> tokens);

  // True when `id` is currently held by some sequence (for invariant checks).
  bool IsUsed(int32_t id) const { return blocks_[id].refs > 0; }
  int RefCount(int32_t id) const { return blocks_[id].refs; }
  bool IsCached(int32_t id) const { return blocks_[id].cached; }

 private:
  struct Block {
    int refs = 0;
    bool cached = false;  // findable under `key` in cached_
    uint64_t key = 0;
    std::vector<int32_t> tokens;                // when cached
    std::list<int32_t>::iterator lru;           // in evictable_, when cached and refs == 0
  };
  void Uncache(int32_t id);

  const int num_blocks_;
  const int block_size_;
  const bool caching_;
  std::vector<Block> blocks_;
  std::vector<int32_t> free_;        // uncached, unheld: a stack, recently freed reused first
  std::list<int32_t> evictable_;     // cached, unheld: least recently used at the front
  absl::flat_hash_map<uint64_t, int32_t> cached_;  // key -> block
};

}  // namespace mxserve
