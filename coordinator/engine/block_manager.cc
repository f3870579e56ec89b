#include "coordinator/engine/block_manager.h"

#include <cstdio>
#include <cstdlib>

namespace mxserve {
namespace {

// A broken pool invariant is a scheduler bug that would corrupt other requests' KV: stop loudly.
[[noreturn]] void Die(const char* what, long a, long b) {
  std::fprintf(stderr, "BlockManager: %s (%ld, %ld)\n", what, a, b);
  std::abort();
}

}  // namespace

BlockManager::BlockManager(int num_blocks, int block_size)
    : num_blocks_(num_blocks), block_size_(block_size), used_(num_blocks, 0) {
  free_.reserve(num_blocks);
  // Lowest ids on top of the stack, so a fresh pool hands out 0, 1, 2, ...
  for (int i = num_blocks - 1; i >= 0; --i) free_.push_back(i);
}

void BlockManager::Allocate(int n, std::vector<int32_t>* table) {
  if (!CanAllocate(n)) Die("Allocate beyond the free blocks", n, num_free_blocks());
  for (int i = 0; i < n; ++i) {
    const int32_t id = free_.back();
    free_.pop_back();
    if (used_[id]) Die("block handed out twice", id, 0);
    used_[id] = 1;
    table->push_back(id);
  }
}

bool BlockManager::AppendSlot(std::vector<int32_t>* table, int num_tokens) {
  const int need = BlocksFor(num_tokens) - static_cast<int>(table->size());
  if (need <= 0) return true;
  if (!CanAllocate(need)) return false;
  Allocate(need, table);
  return true;
}

void BlockManager::Free(std::vector<int32_t>* table) {
  for (int32_t id : *table) {
    if (id < 0 || id >= num_blocks_ || !used_[id]) Die("block freed twice or unknown", id, 0);
    used_[id] = 0;
    free_.push_back(id);
  }
  table->clear();
}

}  // namespace mxserve
