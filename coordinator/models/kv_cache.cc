#include "coordinator/models/kv_cache.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"

namespace mxserve {

absl::StatusOr<std::unique_ptr<KvCache>> KvCache::Create(int num_layers, int num_kv_heads,
                                                         int head_dim, int num_blocks,
                                                         int block_size, int planes) {
  if (planes != 1 && planes != 2) {
    return absl::InvalidArgumentError(absl::StrCat("KV cache planes must be 1 or 2, got ", planes));
  }
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
  c->planes_ = planes;
  c->row_ = row;
  c->layer_bytes_ = per_layer * sizeof(float);
  for (int l = 0; l < planes * num_layers; ++l) {
    void* p = mmap(nullptr, c->layer_bytes_, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
      return absl::ResourceExhaustedError(absl::StrCat("KV cache: mmap of ", c->layer_bytes_,
                                                       " bytes failed: ", std::strerror(errno)));
    }
    (l % planes == 0 ? c->k_ : c->v_).push_back(static_cast<float*>(p));
  }
  return c;
}

KvCache::~KvCache() {
  for (float* p : k_) munmap(p, layer_bytes_);
  for (float* p : v_) munmap(p, layer_bytes_);
}

}  // namespace mxserve
