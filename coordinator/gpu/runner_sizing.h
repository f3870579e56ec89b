// The GPU runner's two sizing rules as plain arithmetic (no CUDA), so that CPU tests hold them:
// how many KV blocks the card's memory allows, and which captured graph a decode batch uses.
#pragma once

#include <algorithm>
#include <cstdint>

namespace mxserve::gpu {

struct KvBudget {
  int64_t total_bytes = 0;          // the card's memory
  int64_t free_bytes = 0;           // free now, after weights and activations
  int64_t free_at_start = 0;        // free before the runner allocated anything
  double utilization = 0.9;         // --gpu-memory-utilization: the runner's share of total
  int64_t kv_cache_bytes = 0;       // > 0: exactly this much, not the utilization rule
  int64_t leave_free_bytes = 0;     // for worker processes sharing the card
  int64_t headroom_bytes = 0;       // for what cuBLASLt and the context allocate themselves
  int64_t bytes_per_block = 1;
};

// Blocks of KV cache: the runner's share of the card less what it already holds (not what other
// processes hold, as vLLM's flag), or --kv-cache-bytes, never more than what is free less the
// headroom and the workers' room. <= 0 when nothing is left.
inline int64_t KvCacheBlocks(const KvBudget& b) {
  const int64_t held = b.free_at_start - b.free_bytes;
  int64_t budget = b.kv_cache_bytes > 0
                       ? b.kv_cache_bytes
                       : static_cast<int64_t>(b.utilization * static_cast<double>(b.total_bytes)) -
                             held - b.headroom_bytes;
  budget = std::min(budget, b.free_bytes - b.headroom_bytes - b.leave_free_bytes);
  return budget <= 0 ? 0 : budget / b.bytes_per_block;
}

// The captured batch size a decode batch of `batch` sequences runs in: 1, 2, 4, 8, then
// multiples of 8 (vLLM's capture sizes), at most max_graph_batch (callers send no larger batch).
inline int GraphBucket(int batch, int max_graph_batch) {
  int b = 1;
  if (batch > 8) {
    b = (batch + 7) / 8 * 8;
  } else {
    while (b < batch) b *= 2;
  }
  return std::min(b, max_graph_batch);
}

}  // namespace mxserve::gpu
