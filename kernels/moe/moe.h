// The MoE expert computation behind one interface (docs/MODELS.md):
//   for each token t and slot j with expert e = expert_ids[t*k+j] >= 0:
//     gu = W_gate_up[e] x_t + b_gate_up[e]          (MXFP4 weights, rows = 2I interleaved g/u)
//     g = gu[0::2]; u = gu[1::2]
//     a = (u' + 1) * g' * sigmoid(alpha * g')       kClampedSwiGlu (gpt-oss): g' = min(g, limit),
//                                                   u' = clamp(u, -limit, limit)
//     a = silu(g) * u = g * sigmoid(g) * u          kSwiGlu (DeepSeek-V3, Kimi K2; no biases)
//     y = W_down[e] a + b_down[e]                   (MXFP4 weights, rows = H)
//     out_t += weights[t*k+j] * y
// out is overwritten (zero for tokens with no slot). Slots with expert id -1 are skipped.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"

namespace mxserve {
class ThreadPool;
}

namespace mxserve::kernels {

// An MXFP4 matrix [rows, cols] in checkpoint layout: blocks [rows, cols/32, 16] (low nibble =
// even element), scales [rows, cols/32] E8M0.
struct Mxfp4Matrix {
  const uint8_t* blocks = nullptr;
  const uint8_t* scales = nullptr;
  int rows = 0;
  int cols = 0;
};

// The expert MLP's activation. Every kernel takes both; the CUDA kernels refuse kSwiGlu.
enum class MoeActivation { kClampedSwiGlu, kSwiGlu };
const char* MoeActivationName(MoeActivation a);  // "swiglu_clamped" / "swiglu"

// A null bias pointer means a zero bias (DeepSeek/Kimi experts have none).
struct ExpertWeights {
  Mxfp4Matrix gate_up;              // [2I, H]
  const float* gate_up_bias = nullptr;  // [2I]
  Mxfp4Matrix down;                 // [H, I]
  const float* down_bias = nullptr; // [H]
};

// The experts of one MoE layer that this process holds. experts[e] is nullptr for an expert
// held elsewhere; a slot naming such an expert is an error (InvalidArgument), never skipped.
struct MoeLayer {
  int hidden = 0;        // H
  int intermediate = 0;  // I
  MoeActivation activation = MoeActivation::kClampedSwiGlu;
  float swiglu_alpha = 1.702f;  // kClampedSwiGlu only
  float swiglu_limit = 7.0f;    // kClampedSwiGlu only
  std::vector<const ExpertWeights*> experts;  // indexed by global expert id
};

struct MoeBatch {
  int num_tokens = 0;            // T (0 is valid: nothing to do)
  int top_k = 0;                 // k
  const float* x = nullptr;      // [T, H]
  const int32_t* expert_ids = nullptr;  // [T, k], -1 = skip
  const float* weights = nullptr;       // [T, k]
};

// Checks ids/shapes (ids in range and held, k >= 1); the kernels call it first.
absl::Status ValidateMoeBatch(const MoeLayer& layer, const MoeBatch& batch);

// The plain oracle: token by token, slot by slot, dequantizing row by row. Single thread.
absl::Status MoeForwardReference(const MoeLayer& layer, const MoeBatch& batch, float* out);

// The fast CPU path: groups tokens by expert, dequantizes each 32-block once in registers and
// applies it to all of the expert's tokens, spreads (expert, row tile) work over the pool.
// Never materialises a dequantized copy of a whole expert. pool may be nullptr (single thread).
absl::Status MoeForwardFast(const MoeLayer& layer, const MoeBatch& batch, float* out,
                            ThreadPool* pool);

}  // namespace mxserve::kernels
