// gpt-oss (GptOssForCausalLM) on one GPU: the same math as the CPU model
// (coordinator/models/gpt_oss.cc) with bf16 weights resident on the device, cuBLASLt GEMMs
// (bf16 operands, fp32 accumulation; the router in fp32), an fp32 residual stream and the
// kernels of kernels/cuda/dense. Experts run in-process on the same stream (MXFP4 kernels of
// kernels/cuda, no host copies) or, given a MoeExecutor, in workers: then each MoE layer's
// activations cross to the host and back.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/gpu/device_buffer.h"
#include "coordinator/gpu/gpu_kv_cache.h"
#include "coordinator/gpu/lt_gemm.h"
#include "coordinator/models/moe_executor.h"
#include "coordinator/models/rope.h"
#include "core/model_config.h"
#include "core/safetensors.h"
#include "kernels/cuda/dense/dense_cuda.h"
#include "kernels/cuda/moe_cuda.h"

namespace mxserve::gpu {

// One step's tokens as the device sees them (GpuModelRunner fills it).
struct GpuStep {
  int num_tokens = 0;
  const int32_t* token_ids = nullptr;          // [T] device
  kernels::cuda::dense::TokenLayout layout;    // positions, sequences, block tables (device)
  int num_rows = 0;                            // logits rows
  const int32_t* rows = nullptr;               // [R] device: the token of each logits row
};

class GptOssGpu {
 public:
  // Uploads the dense weights as bf16 (norms, biases and sinks fp32) to the current device.
  // moe == nullptr: every expert is uploaded too and runs in-process; otherwise `moe` (which
  // must outlive the model) runs them. Errors name the tensor.
  static absl::StatusOr<std::unique_ptr<GptOssGpu>> Create(const ModelConfig& config,
                                                           const Checkpoint& checkpoint,
                                                           MoeExecutor* moe,
                                                           cudaStream_t stream);

  // Scratch for steps of up to max_tokens tokens and max_rows logits rows, allocated now (so
  // that the KV cache can be sized after it).
  absl::Status Reserve(int max_tokens, int max_rows);

  // Runs the step on `stream`, writing logits [R, V] fp32 (device, Reserve'd) into logits().
  absl::Status Forward(const GpuStep& step, const GpuKvCache& cache, cudaStream_t stream);
  const float* logits() const { return logits_.get(); }

  const ModelConfig& config() const { return config_; }
  size_t weight_bytes() const { return weight_bytes_; }

 private:
  struct Layer {
    bool sliding = false;
    DeviceArray<float> input_norm, post_norm;  // [H]
    DeviceArray<uint16_t> qkv_w;               // [(nq + 2 nkv) d, H] bf16
    DeviceArray<float> qkv_b;                  // [(nq + 2 nkv) d]
    DeviceArray<uint16_t> o_w;                 // [H, nq d] bf16
    DeviceArray<float> o_b;                    // [H]
    DeviceArray<float> sinks;                  // [nq]
    DeviceArray<float> router_w;               // [E, H] fp32
    DeviceArray<float> router_b;               // [E]
    std::unique_ptr<kernels::cuda::CudaMoeLayer> experts;  // in-process mode only
  };

  GptOssGpu() = default;
  absl::Status Load(const Checkpoint& ckpt, cudaStream_t stream);
  absl::Status LoadExperts(const Checkpoint& ckpt, cudaStream_t stream);
  absl::Status Attention(int l, const GpuStep& step, const GpuKvCache& cache, cudaStream_t s);
  absl::Status Moe(int l, int num_tokens, cudaStream_t s);

  ModelConfig config_;
  MoeExecutor* moe_ = nullptr;
  RopeParams rope_;
  std::unique_ptr<LtGemm> gemm_;
  size_t weight_bytes_ = 0;
  DeviceArray<float> inv_freq_;       // [d / 2]
  DeviceArray<uint16_t> embed_;       // [V, H] bf16
  DeviceArray<uint16_t> lm_head_;     // [V, H] bf16; empty when tied to embed_
  DeviceArray<float> final_norm_;     // [H]
  std::vector<Layer> layers_;
  kernels::cuda::CudaMoeWorkspace moe_ws_;

  // Activations for Reserve's sizes.
  int max_tokens_ = 0, max_rows_ = 0;
  DeviceArray<float> h_, y32_, tmp_, qkv_, q_, router_logits_, topk_w_, logits_;
  DeviceArray<uint16_t> y16_, attn16_;
  DeviceArray<int32_t> topk_ids_;
  // Host staging for a MoeExecutor (worker mode).
  PinnedArray<float> host_x_, host_out_, host_w_;
  PinnedArray<int32_t> host_ids_;
};

}  // namespace mxserve::gpu
