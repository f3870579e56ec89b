// The GPU runner's paged KV cache: per layer, K and V as bf16
// [num_blocks, block_size, num_kv_heads, head_dim] in device memory (the layout
// kernels/cuda/dense/dense_cuda.h's KvLayer names). Block ids come from the scheduler.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/gpu/device_buffer.h"
#include "kernels/cuda/dense/dense_cuda.h"

namespace mxserve::gpu {

class GpuKvCache {
 public:
  static absl::StatusOr<std::unique_ptr<GpuKvCache>> Create(int num_layers, int num_kv_heads,
                                                            int head_dim, int num_blocks,
                                                            int block_size);
  // Bytes one block takes over all layers, K and V.
  static int64_t BytesPerBlock(int num_layers, int num_kv_heads, int head_dim, int block_size);

  kernels::cuda::dense::KvLayer layer(int l) const {
    return {k_[l].get(), v_[l].get(), num_kv_heads_, head_dim_};
  }
  int num_blocks() const { return num_blocks_; }
  int block_size() const { return block_size_; }

 private:
  GpuKvCache() = default;
  int num_kv_heads_ = 0, head_dim_ = 0, num_blocks_ = 0, block_size_ = 0;
  std::vector<DeviceArray<uint16_t>> k_, v_;
};

}  // namespace mxserve::gpu
