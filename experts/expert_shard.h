// The expert weights one process holds (a worker, or the coordinator in single-process mode): for
// every MoE layer, only its own experts in owned, aligned, resident MXFP4 buffers: copied straight
// from gpt-oss's blocks/scales, or quantized at load from DeepSeek-V3 / Kimi K2's bf16 weights.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/model_config.h"
#include "core/safetensors.h"
#include "experts/expert_batch.h"
#include "kernels/moe/moe.h"

namespace mxserve {

class ThreadPool;

// Owned bytes at a 64-byte boundary (cache line; what the kernels' vector loads like).
class AlignedBytes {
 public:
  AlignedBytes() = default;
  explicit AlignedBytes(size_t n);  // data() == nullptr if the allocation failed
  uint8_t* data() { return ptr_.get(); }
  const uint8_t* data() const { return ptr_.get(); }
  size_t size() const { return size_; }

 private:
  struct Free { void operator()(uint8_t* p) const; };
  std::unique_ptr<uint8_t, Free> ptr_;
  size_t size_ = 0;
};

class ExpertShard {
 public:
  // Called after each layer is resident: (layers done, total layers).
  using ProgressFn = std::function<void(int done, int total)>;

  // Loads `experts` (global ids, any order, no duplicates, each in [0, num_local_experts)) for
  // every layer from model.layers.N.mlp.experts.{gate_up_proj,down_proj}_{blocks,scales,bias}
  // (gpt-oss), or for every MoE layer (l >= first_k_dense_replace) from the bf16
  // model.layers.N.mlp.experts.E.{gate,up,down}_proj.weight (DeepSeek-V3 / Kimi K2), quantized
  // here to MXFP4 (core/mxfp4 EncodeRow; gate and up rows interleaved into gate_up). A dense
  // layer's MoeLayer holds no expert: a batch for it is an error.
  // Errors name the tensor (dtype/shape mismatch, missing, a 0xFF scale with its expert).
  // The checkpoint may be closed afterwards: every byte used is copied.
  static absl::StatusOr<std::unique_ptr<ExpertShard>> Load(const Checkpoint& ckpt,
                                                           const ModelConfig& config,
                                                           std::vector<int> experts,
                                                           const ProgressFn& progress = nullptr);

  // out [T, H] = routed sum over the batch's slots (ids -1 or held here) of layer batch.layer.
  // InvalidArgument for a layer out of range or a hidden size not the model's.
  absl::Status Run(const ExpertBatch& batch, float* out, ThreadPool* pool) const;

  const kernels::MoeLayer& layer(int l) const { return layers_[l].moe; }
  kernels::MoeActivation activation() const { return activation_; }
  int num_layers() const { return static_cast<int>(layers_.size()); }
  int num_experts() const { return num_experts_; }  // in the model
  int hidden() const { return hidden_; }
  int intermediate() const { return intermediate_; }
  const std::vector<int>& experts() const { return experts_; }  // sorted
  bool Holds(int expert) const;
  size_t resident_bytes() const { return resident_bytes_; }

 private:
  ExpertShard() = default;

  struct Layer {
    AlignedBytes gate_up_blocks, gate_up_scales, down_blocks, down_scales;
    std::vector<float> gate_up_bias, down_bias;  // [n_held, 2I], [n_held, H]
    std::vector<kernels::ExpertWeights> weights;  // one per held expert
    kernels::MoeLayer moe;
  };
  absl::Status LoadLayer(const Checkpoint& ckpt, int l, Layer& layer);
  absl::Status LoadLayerBf16(const Checkpoint& ckpt, int l, Layer& layer);
  void Allocate(size_t n, Layer& layer);
  absl::Status AllocateOrFail(int l, size_t n, Layer& layer);
  void Describe(Layer& layer, bool biases);  // layer.weights and layer.moe from the buffers

  int num_experts_ = 0, hidden_ = 0, intermediate_ = 0;
  float alpha_ = 1.702f, limit_ = 7.0f;
  kernels::MoeActivation activation_ = kernels::MoeActivation::kClampedSwiGlu;
  bool bf16_experts_ = false;  // DeepSeek-V3 / Kimi K2 layout
  int first_moe_layer_ = 0;
  std::vector<int> experts_;
  std::vector<Layer> layers_;
  size_t resident_bytes_ = 0;
};

}  // namespace mxserve
