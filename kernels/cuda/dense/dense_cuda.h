// The dense half of a transformer step on an NVIDIA GPU (any card from sm_80 up): embedding
// rows, RMSNorm, bias + RoPE + paged KV store, paged attention (GQA, attention sinks, sliding
// window, prefill and decode in one launch), residual adds and router top-k. The GEMMs between
// them are cuBLASLt's (coordinator/gpu). Each launcher enqueues on `stream` and does not
// synchronise; launch errors surface through cudaGetLastError. CPU twins with the same
// arguments on host memory: kernels/dense/dense_ref.h.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace mxserve::kernels::cuda::dense {

// bf16 values travel as their bit patterns (uint16_t) so that this header needs no cuda_bf16.h.
using bf16_bits = uint16_t;

// Where each token of a step sits (device arrays).
struct TokenLayout {
  int num_tokens = 0;
  const int32_t* positions = nullptr;     // [T] position in its sequence
  const int32_t* token_seq = nullptr;     // [T] its sequence's row of block_tables
  const int32_t* block_tables = nullptr;  // [S, max_blocks] KV block ids of each sequence
  int max_blocks = 0;                     // row stride of block_tables
  int block_size = 0;                     // tokens per KV block
};

// The KV cache of one layer: K and V each [num_blocks, block_size, num_kv_heads, head_dim] bf16.
// Position p of sequence s lives in block block_tables[s][p / block_size], row p % block_size.
struct KvLayer {
  bf16_bits* k = nullptr;
  bf16_bits* v = nullptr;
  int num_kv_heads = 0;
  int head_dim = 0;
};

// out[t, :] = float(table[ids[t], :]); table [V, H] bf16, out [T, H] fp32.
void EmbedRows(const bf16_bits* table, const int32_t* ids, int num_tokens, int hidden, float* out,
               cudaStream_t stream);

// For r < num_rows, with x_r = x[rows ? rows[r] : r, :]:
//   y_r = w * (x_r / sqrt(mean(x_r^2) + eps))   (fp32 math, the mean's sum in fp32 or better)
// written to out32[r, :] (fp32) and/or out16[r, :] (bf16, round to nearest even) when non-null.
void RmsNorm(const float* x, const int32_t* rows, int num_rows, int hidden, const float* w,
             float eps, float* out32, bf16_bits* out16, cudaStream_t stream);

// h[t, :] += a[t, :] (+ bias[:] when bias is non-null); h and a [T, N] fp32.
void AddResidual(float* h, const float* a, const float* bias, int num_tokens, int n,
                 cudaStream_t stream);

// x[t, :] += bias[:]; x [T, N] fp32 (the router's logits).
void AddBias(float* x, const float* bias, int num_tokens, int n, cudaStream_t stream);

// RoPE constants: half-split rotation of whole heads (rotary_dim = head_dim). For token t at
// position p and i < head_dim / 2: f = float(p) * inv_freq[i] (one fp32 product),
// cos = float(cos(double(f))) * concentration, sin likewise; a head x becomes
// [x1 * cos - x2 * sin, x2 * cos + x1 * sin] with x1 = x[:d/2], x2 = x[d/2:].
struct Rope {
  const float* inv_freq = nullptr;  // [head_dim / 2] device
  float concentration = 1.0f;
};

// qkv [T, (nq + 2 nkv) d] fp32 is a step's fused projection without bias (q heads, then k, then
// v). Adds bias [(nq + 2 nkv) d] (nullable), rotates the q and k heads, writes q to q_out
// [T, nq d] fp32, and k and v as bf16 into `kv` at each token's own position.
void QkvRopeStore(const float* qkv, const float* bias, int num_q_heads, Rope rope,
                  const TokenLayout& tokens, KvLayer kv, float* q_out, cudaStream_t stream);

// Attention of every token over its sequence's cached keys and values, causal: the token at
// position p sees positions [max(0, p - window + 1), p] (window <= 0: [0, p]); K and V of
// every position up to p are in the cache (QkvRopeStore ran). Query head h reads KV head
// h / (nq / nkv). With sinks (nullable, [nq] fp32), head h's softmax runs over its scores and
// one more logit sinks[h] that adds to the denominator only. scores = scale * q . k.
// q [T, nq d] fp32; out [T, nq d] bf16 (the o_proj GEMM's operand). Chooses its own tiling for
// prefill and decode; works for any context the cache holds.
void PagedAttention(const float* q, int num_q_heads, const TokenLayout& tokens, KvLayer kv,
                    const float* sinks, int window, float scale, bf16_bits* out,
                    cudaStream_t stream);

// Allocates PagedAttention's split workspace for `stream` on the current device now: call it
// before capturing a graph on the stream (no memory can be allocated during a capture, and a
// launch captured without the workspace runs unsplit). Returns false if it could not.
bool ReserveAttentionWorkspace(cudaStream_t stream);

// Router: for each token t, the top_k largest of logits[t, :num_experts] in descending order
// (equal logits: lower expert id first) into ids [T, top_k], and weights [T, top_k] = softmax
// over the chosen logits (exp(z - z_max) / sum). num_experts up to 1024, top_k up to 32.
void RouterTopK(const float* logits, int num_tokens, int num_experts, int top_k, int32_t* ids,
                float* weights, cudaStream_t stream);

// out[r] = the lowest id among the largest values of logits[r, :vocab] (greedy sampling, as
// Sampler::Argmax); logits [rows, vocab] fp32, out [rows] int32.
void ArgmaxRows(const float* logits, int rows, int vocab, int32_t* out, cudaStream_t stream);

}  // namespace mxserve::kernels::cuda::dense
