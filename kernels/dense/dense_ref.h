// The slow obvious twins of kernels/cuda/dense/dense_cuda.h on host memory: the same arguments
// (host pointers, no stream) and the same math as coordinator/models/gpt_oss.cc, so that the GPU
// check (tests/gpu/dense_cuda_check.cc) compares each kernel with a plain loop.
#pragma once

#include <cstdint>

namespace mxserve::kernels::dense_ref {

using bf16_bits = uint16_t;

// Field for field the CUDA header's structs, with host arrays (that header needs cuda_runtime.h,
// which machines without CUDA lack).
struct TokenLayout {
  int num_tokens = 0;
  const int32_t* positions = nullptr;     // [T]
  const int32_t* token_seq = nullptr;     // [T]
  const int32_t* block_tables = nullptr;  // [S, max_blocks]
  int max_blocks = 0;
  int block_size = 0;
};

struct KvLayer {
  bf16_bits* k = nullptr;  // [num_blocks, block_size, num_kv_heads, head_dim]
  bf16_bits* v = nullptr;
  int num_kv_heads = 0;
  int head_dim = 0;
};

struct Rope {
  const float* inv_freq = nullptr;  // [head_dim / 2]
  float concentration = 1.0f;
};

void EmbedRows(const bf16_bits* table, const int32_t* ids, int num_tokens, int hidden, float* out);

// gpt_oss.cc's RmsNorm (sum of squares in double) on the gathered rows.
void RmsNorm(const float* x, const int32_t* rows, int num_rows, int hidden, const float* w,
             float eps, float* out32, bf16_bits* out16);

// h = h + (a + bias): the o_proj output with its bias, then the residual add.
void AddResidual(float* h, const float* a, const float* bias, int num_tokens, int n);

void AddBias(float* x, const float* bias, int num_tokens, int n);

void QkvRopeStore(const float* qkv, const float* bias, int num_q_heads, Rope rope,
                  const TokenLayout& tokens, KvLayer kv, float* q_out);

// Two passes per (token, head) as gpt_oss.cc's Attend: scores, max over them and the sink,
// exp, sum, weighted V, times 1 / denominator, rounded to bf16.
void PagedAttention(const float* q, int num_q_heads, const TokenLayout& tokens, KvLayer kv,
                    const float* sinks, int window, float scale, bf16_bits* out);

void RouterTopK(const float* logits, int num_tokens, int num_experts, int top_k, int32_t* ids,
                float* weights);

}  // namespace mxserve::kernels::dense_ref
