#include "coordinator/engine/block_manager.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace mxserve {
namespace {

// A broken pool invariant is a scheduler bug that would corrupt other requests' KV: stop loudly.
[[noreturn]] void Die(const char* what, long a, long b) {
  std::fprintf(stderr, "BlockManager: %s (%ld, %ld)\n", what, a, b);
  std::abort();
}

uint64_t Mix(uint64_t x) {  // splitmix64 finalizer
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

uint64_t BlockManager::HashBlock(uint64_t parent, std::span<const int32_t> tokens) {
  uint64_t h = Mix(parent ^ 0xA0761D6478BD642Full);
  for (int32_t t : tokens) h = Mix(h ^ static_cast<uint32_t>(t));
  return Mix(h ^ tokens.size());
}

BlockManager::BlockManager(int num_blocks, int block_size, bool enable_prefix_caching)
    : num_blocks_(num_blocks),
      block_size_(block_size),
      caching_(enable_prefix_caching),
      blocks_(num_blocks) {
  free_.reserve(num_blocks);
  // Lowest ids on top of the stack, so a fresh pool hands out 0, 1, 2, ...
  for (int i = num_blocks - 1; i >= 0; --i) free_.push_back(i);
}

void BlockManager::Uncache(int32_t id) {
  Block& b = blocks_[id];
  if (!b.cached) return;
  cached_.erase(b.key);
  b.cached = false;
  b.tokens.clear();
}

void BlockManager::Allocate(int n, std::vector<int32_t>* table) {
  if (!CanAllocate(n)) Die("Allocate beyond the free blocks", n, num_free_blocks());
  for (int i = 0; i < n; ++i) {
    int32_t id;
    if (!free_.empty()) {
      id = free_.back();
      free_.pop_back();
    } else {
      id = evictable_.front();
      evictable_.pop_front();
      Uncache(id);
    }
    Block& b = blocks_[id];
    if (b.refs != 0 || b.cached) Die("block handed out twice", id, b.refs);
    b.refs = 1;
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
  for (auto it = table->rbegin(); it != table->rend(); ++it) {
    const int32_t id = *it;
    if (id < 0 || id >= num_blocks_ || blocks_[id].refs <= 0) {
      Die("block freed twice or unknown", id, 0);
    }
    Block& b = blocks_[id];
    if (--b.refs > 0) continue;
    if (b.cached) {
      b.lru = evictable_.insert(evictable_.end(), id);
    } else {
      free_.push_back(id);
    }
  }
  table->clear();
}

std::vector<int32_t> BlockManager::FindCached(std::span<const uint64_t> keys,
                                              std::span<const int32_t> tokens) const {
  std::vector<int32_t> ids;
  if (!caching_) return ids;
  for (size_t i = 0; i < keys.size(); ++i) {
    auto it = cached_.find(keys[i]);
    if (it == cached_.end()) break;
    const Block& b = blocks_[it->second];
    const size_t start = i * static_cast<size_t>(block_size_);
    if (start + block_size_ > tokens.size() ||
        !std::equal(b.tokens.begin(), b.tokens.end(), tokens.begin() + start,
                    tokens.begin() + start + block_size_)) {
      break;
    }
    ids.push_back(it->second);
  }
  return ids;
}

int BlockManager::NumFree(std::span<const int32_t> ids) const {
  int n = 0;
  for (int32_t id : ids) n += blocks_[id].refs == 0 ? 1 : 0;
  return n;
}

void BlockManager::Share(std::span<const int32_t> ids, std::vector<int32_t>* table) {
  for (int32_t id : ids) {
    Block& b = blocks_[id];
    if (!b.cached) Die("sharing a block that is not cached", id, b.refs);
    if (b.refs++ == 0) evictable_.erase(b.lru);
    table->push_back(id);
  }
}

void BlockManager::Register(int32_t id, uint64_t key, std::span<const int32_t> tokens) {
  if (!caching_) return;
  Block& b = blocks_[id];
  if (b.refs <= 0) Die("registering a free block", id, 0);
  if (static_cast<int>(tokens.size()) != block_size_) {
    Die("registering a block that is not full", id, static_cast<long>(tokens.size()));
  }
  if (b.cached) return;  // a block taken from the cache, already findable
  if (!cached_.emplace(key, id).second) return;
  b.cached = true;
  b.key = key;
  b.tokens.assign(tokens.begin(), tokens.end());
}

}  // namespace mxserve
