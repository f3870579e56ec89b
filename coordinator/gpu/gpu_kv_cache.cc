#include "coordinator/gpu/gpu_kv_cache.h"

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace mxserve::gpu {

int64_t GpuKvCache::BytesPerBlock(int num_layers, int num_kv_heads, int head_dim,
                                  int block_size) {
  return int64_t{2} * num_layers * block_size * num_kv_heads * head_dim * sizeof(uint16_t);
}

absl::StatusOr<std::unique_ptr<GpuKvCache>> GpuKvCache::Create(int num_layers, int num_kv_heads,
                                                               int head_dim, int num_blocks,
                                                               int block_size) {
  if (num_layers <= 0 || num_kv_heads <= 0 || head_dim <= 0 || num_blocks <= 0 ||
      block_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "GPU KV cache: layers ", num_layers, ", kv heads ", num_kv_heads, ", head_dim ", head_dim,
        ", blocks ", num_blocks, ", block_size ", block_size, " must all be > 0"));
  }
  std::unique_ptr<GpuKvCache> c(new GpuKvCache());
  c->num_kv_heads_ = num_kv_heads;
  c->head_dim_ = head_dim;
  c->num_blocks_ = num_blocks;
  c->block_size_ = block_size;
  const size_t per_layer =
      static_cast<size_t>(num_blocks) * block_size * num_kv_heads * head_dim;
  c->k_.resize(num_layers);
  c->v_.resize(num_layers);
  for (int l = 0; l < num_layers; ++l) {
    RETURN_IF_ERROR(c->k_[l].Reserve(per_layer));
    RETURN_IF_ERROR(c->v_[l].Reserve(per_layer));
  }
  return c;
}

}  // namespace mxserve::gpu
