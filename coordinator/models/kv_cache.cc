#include "coordinator/models/kv_cache.h"

#include <limits>

#include "absl/strings/str_cat.h"

namespace mxserve {

absl::StatusOr<std::unique_ptr<KvCache>> KvCache::Create(int num_layers, int num_kv_heads,
                                                         int head_dim, int num_blocks,
                                                         int block_size) {
  if (num_layers <= 0 || num_kv_heads <= 0 || head_dim <= 0 || num_blocks <= 0 ||
      block_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV cache dimensions must be positive: layers=", num_layers, " kv_heads=", num_kv_heads,
        " head_dim=", head_dim, " num_blocks=", num_blocks, " block_size=", block_size));
  }
  const size_t row = static_cast<size_t>(num_kv_heads) * head_dim;
  const size_t per_layer = static_cast<size_t>(num_blocks) * block_size * row;
  if (per_layer / row != static_cast<size_t>(num_blocks) * block_size ||
      per_layer > std::numeric_limits<size_t>::max() / (2 * sizeof(float) * num_layers)) {
    return absl::InvalidArgumentError("KV cache size overflows");
  }
  std::unique_ptr<KvCache> c(new KvCache());
  c->num_layers_ = num_layers;
  c->num_kv_heads_ = num_kv_heads;
  c->head_dim_ = head_dim;
  c->num_blocks_ = num_blocks;
  c->block_size_ = block_size;
  c->row_ = row;
  c->k_.resize(num_layers);
  c->v_.resize(num_layers);
  for (int l = 0; l < num_layers; ++l) {
    c->k_[l].assign(per_layer, 0.0f);
    c->v_[l].assign(per_layer, 0.0f);
  }
  return c;
}

}  // namespace mxserve
