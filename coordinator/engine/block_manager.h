// BlockManager: the fixed pool of KV-cache block ids the ModelRunner's cache holds. Hands each
// block to at most one sequence at a time; sequences grow their block tables a slot at a time.
#pragma once

#include <cstdint>
#include <vector>

namespace mxserve {

class BlockManager {
 public:
  BlockManager(int num_blocks, int block_size);

  int block_size() const { return block_size_; }
  int num_blocks() const { return num_blocks_; }
  int num_free_blocks() const { return static_cast<int>(free_.size()); }
  int num_used_blocks() const { return num_blocks_ - num_free_blocks(); }

  // Blocks needed to hold `num_tokens` positions.
  int BlocksFor(int num_tokens) const { return (num_tokens + block_size_ - 1) / block_size_; }

  // Whether `n` more blocks are free.
  bool CanAllocate(int n) const { return n <= num_free_blocks(); }
  // Takes `n` free blocks (caller checked CanAllocate) and appends them to `table`.
  void Allocate(int n, std::vector<int32_t>* table);
  // Grows `table` so it covers positions [0, num_tokens). Returns false (and changes nothing)
  // when the pool has too few free blocks.
  bool AppendSlot(std::vector<int32_t>* table, int num_tokens);
  // Returns every block of `table` to the pool and clears it.
  void Free(std::vector<int32_t>* table);

  // True when `id` is currently handed out (for invariant checks).
  bool IsUsed(int32_t id) const { return used_[id] != 0; }

 private:
  const int num_blocks_;
  const int block_size_;
  std::vector<int32_t> free_;   // a stack: recently freed blocks are reused first
  std::vector<uint8_t> used_;
};

}  // namespace mxserve
