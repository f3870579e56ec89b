// Paged KV cache for the CPU dense runner: per layer, K and V as fp32
// [num_blocks, block_size, kv_heads, head_dim], or (planes = 1) one row per slot only, read
// through K(): MLA's latent cache, kv_heads = 1 and head_dim = kv_lora_rank + qk_rope_head_dim. Position p of a sequence lives in block
// block_table[p / block_size], slot p % block_size (block ids come from the scheduler).
// The storage is anonymous mmap: zero pages are committed only when first written, so a large
// --kv-cache-bytes costs memory only for the blocks sequences actually use.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"

namespace mxserve {

class KvCache {
 public:
  static absl::StatusOr<std::unique_ptr<KvCache>> Create(int num_layers, int num_kv_heads,
                                                         int head_dim, int num_blocks,
                                                         int block_size, int planes = 2);

  int num_layers() const { return num_layers_; }
  int num_kv_heads() const { return num_kv_heads_; }
  int head_dim() const { return head_dim_; }
  int num_blocks() const { return num_blocks_; }
  int block_size() const { return block_size_; }
  int planes() const { return planes_; }  // 2: K and V; 1: K() only (V() must not be called)

  // [kv_heads, head_dim] row of one slot. No bounds checks: the runner validates block tables.
  float* K(int layer, int block, int slot) { return k_[layer] + Offset(block, slot); }
  float* V(int layer, int block, int slot) { return v_[layer] + Offset(block, slot); }
  const float* K(int layer, int block, int slot) const { return k_[layer] + Offset(block, slot); }
  const float* V(int layer, int block, int slot) const { return v_[layer] + Offset(block, slot); }
  ~KvCache();
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  // Slot address for a sequence position through its block table.
  float* KAt(int layer, const std::vector<int32_t>& block_table, int64_t pos) {
    return K(layer, block_table[pos / block_size_], static_cast<int>(pos % block_size_));
  }
  float* VAt(int layer, const std::vector<int32_t>& block_table, int64_t pos) {
    return V(layer, block_table[pos / block_size_], static_cast<int>(pos % block_size_));
  }

 private:
  KvCache() = default;
  size_t Offset(int block, int slot) const {
    return (static_cast<size_t>(block) * block_size_ + slot) * row_;
  }

  int num_layers_ = 0, num_kv_heads_ = 0, head_dim_ = 0, num_blocks_ = 0, block_size_ = 0;
  int planes_ = 2;
  size_t row_ = 0;  // kv_heads * head_dim
  size_t layer_bytes_ = 0;
  std::vector<float*> k_, v_;  // mmap'd, layer_bytes_ each; v_ empty when planes_ == 1
};

}  // namespace mxserve
