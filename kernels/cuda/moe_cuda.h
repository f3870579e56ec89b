// The MoE expert computation of kernels/moe/moe.h on an NVIDIA GPU (sm_90a): MXFP4 weights held
// on the device in a kernel layout, bf16 activations, fp32 accumulation. See README.md here.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/moe/moe.h"

namespace mxserve::kernels::cuda {

// Device-resident experts of one layer, in the kernel's swizzled layout (converted on the device
// from checkpoint bytes at upload). Experts not held are absent; a slot naming one is skipped by
// the kernels (callers validate ids first: MoeForwardCuda's contract is "ids already checked").
class CudaMoeLayer {
 public:
  ~CudaMoeLayer();
  CudaMoeLayer(const CudaMoeLayer&) = delete;
  CudaMoeLayer& operator=(const CudaMoeLayer&) = delete;

  // Uploads every non-null experts[e] of `host` (checkpoint layout, host memory) to the current
  // device. `stream` orders the copies; the call returns once the upload is complete.
  static absl::StatusOr<std::unique_ptr<CudaMoeLayer>> Upload(const MoeLayer& host,
                                                              cudaStream_t stream);

  int hidden() const { return hidden_; }
  int intermediate() const { return intermediate_; }
  int num_experts() const { return num_experts_; }  // global ids 0..num_experts-1
  int num_held() const { return num_held_; }
  size_t device_bytes() const { return device_bytes_; }
  // MXFP4 bytes (blocks + scales, checkpoint sizes) of one expert: what a kernel must read.
  size_t expert_weight_bytes() const;

 private:
  friend struct LayerAccess;
  CudaMoeLayer() = default;
  int hidden_ = 0, intermediate_ = 0, num_experts_ = 0, num_held_ = 0;
  int kp_h_ = 0, kp_i_ = 0;  // K padded to 64 for gate_up (H) and down (I)
  float alpha_ = 1.702f, limit_ = 7.0f;
  bool has_gu_bias_ = false, has_down_bias_ = false;
  bool small_scales_ = true;  // every scale byte <= 128 (no 0xFF): one-multiply decode
  size_t device_bytes_ = 0;
  int32_t* d_local_ = nullptr;        // [E] global id -> held index or -1
  std::vector<int32_t> local_;        // its host copy (kAuto's slot counts)
  // The held experts are exactly [held_lo_, held_lo_ + num_held_) (held index = id - held_lo_):
  // the fused kernel then does not read d_local_ (SelfRoute::held_n).
  bool held_range_ = false;
  int held_lo_ = 0;
  uint8_t* d_gu_q_ = nullptr;         // [held][2I/8][Kp_h/... ] swizzled nibbles
  uint8_t* d_gu_s_ = nullptr;         // [held][2I/8][chunks][8][4] E8M0
  float* d_gu_b_ = nullptr;           // [held][2I] (zeros when absent)
  uint8_t* d_dn_q_ = nullptr;
  uint8_t* d_dn_s_ = nullptr;
  float* d_dn_b_ = nullptr;
};

// Scratch for one stream: grows to the largest batch seen (never shrinks).
class CudaMoeWorkspace {
 public:
  CudaMoeWorkspace() = default;
  ~CudaMoeWorkspace();
  CudaMoeWorkspace(const CudaMoeWorkspace&) = delete;
  CudaMoeWorkspace& operator=(const CudaMoeWorkspace&) = delete;
  absl::Status Reserve(const CudaMoeLayer& layer, int num_tokens, int top_k);

 private:
  friend struct LayerAccess;
  void Free();
  size_t pairs_cap_ = 0, experts_cap_ = 0, kp_h_cap_ = 0, kp_i_cap_ = 0, h_cap_ = 0;
  int32_t* d_counts_ = nullptr;   // [E] counts, then [E+1] offsets, [E] cursors, [1] tile count, [1] second-height tile count
  int32_t* d_tiles_ = nullptr;    // [max tiles][3] (held expert, row start, rows)
  int32_t* d_sorted_ = nullptr;   // [P] pair index (t*k+j) by sorted row
  uint16_t* d_a_ = nullptr;       // [P][Kp_h] bf16, permuted or plain (gate_up operand)
  uint16_t* d_act_ = nullptr;     // [P][Kp_i] bf16, permuted or plain (down operand)
  float* d_y_ = nullptr;          // [P][H] per-slot outputs, weighted
  uint32_t* d_sync_ = nullptr;    // [1] the fused kernel's grid barrier (zeroed at allocation)
  int32_t* d_pair_done_ = nullptr;  // [3 + max tiles] the paired kst launch's counts (zeroed at allocation)
  size_t tiles_cap_ = 0;
  // Two tile heights: the second height's GEMMs run on side_, forked after the routing (fork_)
  // and joined before the combine (join_), beside the first's. Made with the first buffers (so
  // not while a caller captures a graph), kept until the workspace goes.
  cudaStream_t side_ = nullptr;
  cudaEvent_t fork_ = nullptr, join_ = nullptr;
};

// A batch whose arrays live on the device.
struct CudaMoeBatch {
  int num_tokens = 0;
  int top_k = 0;
  const float* x = nullptr;              // [T, H] device
  const int32_t* expert_ids = nullptr;   // [T, k] device, -1 = skip (ids already validated)
  const float* weights = nullptr;        // [T, k] device
  // Optional: expert_ids' host copy. kAuto then sizes its tiles by each expert's slot count (the
  // exact tile counts; skewed routing spreads them) instead of expecting uniform routing.
  const int32_t* host_expert_ids = nullptr;
};

// Which kernel configuration to run (kAuto picks by token-slots per expert hit): decode =
// 8-row tiles, decode16 = 16-row tiles (both the weight-streaming kernel), mid = 32 (the
// weight-streaming kernel where kernels/cuda/lab is linked, else the mma.sync one), prefill = 64,
// wgmma = 128 (Hopper tensor-core kernel, moe_cuda_wgmma_tma.cu). README.md has the plan.
enum class CudaMoePath { kAuto, kDecode, kDecode16, kMid, kPrefill, kWgmma };

// out [T, H] (device) is overwritten. Enqueues on `stream`; does not synchronise. Deterministic:
// the same inputs give the same bits (per-slot outputs are summed per token in slot order).
absl::Status MoeForwardCuda(const CudaMoeLayer& layer, const CudaMoeBatch& batch, float* out,
                            CudaMoeWorkspace& ws, cudaStream_t stream,
                            CudaMoePath path = CudaMoePath::kAuto);

// Host-memory convenience with its own stream and pinned staging buffers (the worker's path).
// Not thread-safe: one caller at a time (the worker serialises).
class CudaMoeRunner {
 public:
  static absl::StatusOr<std::unique_ptr<CudaMoeRunner>> Create(int device);
  ~CudaMoeRunner();
  // Validates the batch against `host_layer` (ids held etc.), then copies in, runs, copies out.
  // x and out go straight to and from the device when they are page-locked host memory (PinHost,
  // or cudaMallocHost), through the runner's pinned staging buffers otherwise.
  absl::Status Run(const CudaMoeLayer& layer, const MoeLayer& host_layer, const MoeBatch& batch,
                   float* out);
  // The same with the bf16 wire's tensors: x and out [T, H] little-endian bf16 at any alignment
  // (batch.x is ignored). Half of Run's bytes cross PCIe, widened and narrowed on the device; out
  // holds the bytes that rounding Run's output on the host (core/bf16.h) would give.
  absl::Status RunBf16(const CudaMoeLayer& layer, const MoeLayer& host_layer, const MoeBatch& batch,
                       const void* x, void* out);
  // cudaHostRegister / cudaHostUnregister of host memory the caller keeps mapped (a failure to
  // register is not sticky: the error is cleared and returned).
  absl::Status PinHost(void* p, size_t n);
  void UnpinHost(void* p);
  cudaStream_t stream() const { return stream_; }

 private:
  CudaMoeRunner() = default;
  absl::Status Grow(size_t tokens, int k, int hidden);
  // Run and RunBf16: x and out hold esize-byte elements (4 f32, 2 bf16).
  absl::Status RunWire(const CudaMoeLayer& layer, const MoeLayer& host_layer, const MoeBatch& batch,
                       const void* x, void* out, size_t esize);
  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  CudaMoeWorkspace ws_;
  size_t cap_x_ = 0, cap_ids_ = 0;
  float* h_x_ = nullptr;  // pinned [T,H] in, reused for out
  int32_t* h_ids_ = nullptr;
  float* h_w_ = nullptr;
  float* d_x_ = nullptr;
  float* d_out_ = nullptr;
  int32_t* d_ids_ = nullptr;
  float* d_w_ = nullptr;
};

// A CUDA error that leaves the context unusable (sticky) cannot be recovered in-process:
// logs and exits non-zero (the supervisor restarts the worker; restarts are cheap). Other
// errors come back as Internal.
absl::Status CudaCheck(cudaError_t e, const char* what);

}  // namespace mxserve::kernels::cuda
