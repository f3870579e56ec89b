// The dense step's elementwise and per-row kernels: EmbedRows, RmsNorm, AddResidual, AddBias,
// QkvRopeStore, RouterTopK (PagedAttention is attention_cuda.cu). Each mirrors the arithmetic of
// kernels/dense/dense_ref.cc operation for operation (explicit _rn intrinsics where nvcc would
// otherwise fuse a multiply and an add), so most outputs equal the twin's bits.
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "kernels/cuda/dense/dense_cuda.h"
#include "kernels/cuda/dense/dense_util.cuh"

namespace mxserve::kernels::cuda::dense {
namespace detail {
namespace {

__global__ void NoopKernel() {}

}  // namespace

void ReportBadArguments(cudaStream_t stream) {
  NoopKernel<<<0, 1, 0, stream>>>();  // a zero grid: cudaErrorInvalidConfiguration
}

}  // namespace detail

namespace {

using detail::Bf16Float;
using detail::Bf16Rn;

// Grid for an elementwise pass over `n` items at 256 threads (grid-stride beyond it).
unsigned ElementwiseBlocks(int64_t n) {
  const int64_t b = (n + 255) / 256;
  return static_cast<unsigned>(b < 65536 ? (b > 0 ? b : 1) : 65536);
}

__global__ void EmbedRowsKernel(const uint16_t* table, const int32_t* ids, int hidden,
                                float* out) {
  const int t = blockIdx.x;
  const uint16_t* row = table + static_cast<int64_t>(ids[t]) * hidden;
  float* o = out + static_cast<int64_t>(t) * hidden;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) o[i] = Bf16Float(row[i]);
}

// One block of 256 threads per row; the sum of squares in double, as the twin's.
__global__ void RmsNormKernel(const float* x, const int32_t* rows, int hidden, const float* w,
                              float eps, float* out32, uint16_t* out16) {
  __shared__ double warp_sums[8];
  __shared__ float inv_s;
  const int r = blockIdx.x;
  const float* xr = x + static_cast<int64_t>(rows != nullptr ? rows[r] : r) * hidden;
  double ss = 0;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
    const double v = xr[i];
    ss += v * v;
  }
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if ((threadIdx.x & 31) == 0) warp_sums[threadIdx.x >> 5] = ss;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0;
    for (int i = 0; i < static_cast<int>(blockDim.x >> 5); ++i) total += warp_sums[i];
    const float var = static_cast<float>(total / hidden);
    inv_s = static_cast<float>(1.0 / sqrt(static_cast<double>(var + eps)));
  }
  __syncthreads();
  const float inv = inv_s;
  const int64_t base = static_cast<int64_t>(r) * hidden;
  for (int i = threadIdx.x; i < hidden; i += blockDim.x) {
    const float y = __fmul_rn(w[i], __fmul_rn(xr[i], inv));
    if (out32 != nullptr) out32[base + i] = y;
    if (out16 != nullptr) out16[base + i] = Bf16Rn(y);
  }
}

__global__ void AddResidualKernel(float* h, const float* a, const float* bias, int64_t total,
                                  int n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float add = bias != nullptr ? __fadd_rn(a[i], bias[i % n]) : a[i];
    h[i] = __fadd_rn(h[i], add);
  }
}

__global__ void AddBiasKernel(float* x, const float* bias, int64_t total, int n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[i] = __fadd_rn(x[i], bias[i % n]);
  }
}

// One block per token: cos/sin of its position into shared memory (double cos/sin, as the CPU),
// then every (head, i < d/2) pair of the q and k heads rotated, and the v heads copied.
__global__ void QkvRopeStoreKernel(const float* qkv, const float* bias, int nq, Rope rope,
                                   TokenLayout tl, KvLayer kv, float* q_out) {
  __shared__ float cs[128], sn[128];
  const int t = blockIdx.x, d = kv.head_dim, half = d / 2, nkv = kv.num_kv_heads;
  const int width = (nq + 2 * nkv) * d;
  const int pos = tl.positions[t];
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    const float f = __fmul_rn(static_cast<float>(pos), rope.inv_freq[i]);
    double s, c;
    sincos(static_cast<double>(f), &s, &c);
    cs[i] = __fmul_rn(static_cast<float>(c), rope.concentration);
    sn[i] = __fmul_rn(static_cast<float>(s), rope.concentration);
  }
  __syncthreads();
  const int block = tl.block_tables[static_cast<int64_t>(tl.token_seq[t]) * tl.max_blocks +
                                    pos / tl.block_size];
  const int64_t cache_row =
      (static_cast<int64_t>(block) * tl.block_size + pos % tl.block_size) * nkv * d;
  const float* row = qkv + static_cast<int64_t>(t) * width;
  auto in = [&](int i) { return bias != nullptr ? __fadd_rn(row[i], bias[i]) : row[i]; };
  for (int p = threadIdx.x; p < (nq + nkv) * half; p += blockDim.x) {
    const int hd = p / half, i = p % half;
    const int at = hd * d + i;
    const float a = in(at), b = in(at + half);
    const float o1 = __fsub_rn(__fmul_rn(a, cs[i]), __fmul_rn(b, sn[i]));
    const float o2 = __fadd_rn(__fmul_rn(b, cs[i]), __fmul_rn(a, sn[i]));
    if (hd < nq) {
      float* q = q_out + static_cast<int64_t>(t) * nq * d + at;
      q[0] = o1;
      q[half] = o2;
    } else {
      uint16_t* k = kv.k + cache_row + (hd - nq) * d + i;
      k[0] = Bf16Rn(o1);
      k[half] = Bf16Rn(o2);
    }
  }
  for (int p = threadIdx.x; p < nkv * d; p += blockDim.x) {
    kv.v[cache_row + p] = Bf16Rn(in((nq + nkv) * d + p));
  }
}

constexpr int kRouterWarps = 4;
constexpr int kMaxExperts = 1024, kMaxTopK = 32;

__device__ __forceinline__ bool Better(float av, int ai, float bv, int bi) {
  return av > bv || (av == bv && ai < bi);
}

// One warp per token: top_k rounds of a warp-wide arg-max over the experts not yet chosen
// (equal logits: the lower id wins), then lane 0 forms the softmax in the twin's order.
__global__ void RouterTopKKernel(const float* logits, int num_tokens, int num_experts, int top_k,
                                 int32_t* ids, float* weights) {
  __shared__ float z_s[kRouterWarps][kMaxExperts];
  __shared__ uint32_t taken[kRouterWarps][kMaxExperts / 32];
  __shared__ float val_s[kRouterWarps][kMaxTopK];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int t = blockIdx.x * kRouterWarps + warp;
  if (t >= num_tokens) return;
  float* z = z_s[warp];
  uint32_t* tk = taken[warp];
  for (int i = lane; i < num_experts; i += 32) z[i] = logits[static_cast<int64_t>(t) * num_experts + i];
  tk[lane] = 0;
  __syncwarp();
  for (int k = 0; k < top_k; ++k) {
    float bv = -INFINITY;
    int bi = INT_MAX;
    for (int i = lane; i < num_experts; i += 32) {
      if ((tk[i >> 5] >> (i & 31)) & 1u) continue;
      if (Better(z[i], i, bv, bi)) {
        bv = z[i];
        bi = i;
      }
    }
    for (int o = 16; o > 0; o >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
      const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
      if (Better(ov, oi, bv, bi)) {
        bv = ov;
        bi = oi;
      }
    }
    if (lane == 0) {
      if (bi != INT_MAX) tk[bi >> 5] |= 1u << (bi & 31);  // INT_MAX: only NaN logits were left
      ids[static_cast<int64_t>(t) * top_k + k] = bi == INT_MAX ? -1 : bi;
      val_s[warp][k] = bv;
    }
    __syncwarp();
  }
  if (lane == 0) {
    float* w = weights + static_cast<int64_t>(t) * top_k;
    const float zmax = val_s[warp][0];
    float sum = 0;
    for (int k = 0; k < top_k; ++k) {
      w[k] = expf(val_s[warp][k] - zmax);
      sum = __fadd_rn(sum, w[k]);
    }
    for (int k = 0; k < top_k; ++k) w[k] = __fdiv_rn(w[k], sum);
  }
}

}  // namespace

void EmbedRows(const bf16_bits* table, const int32_t* ids, int num_tokens, int hidden, float* out,
               cudaStream_t stream) {
  if (num_tokens <= 0) return;
  EmbedRowsKernel<<<num_tokens, 256, 0, stream>>>(table, ids, hidden, out);
}

void RmsNorm(const float* x, const int32_t* rows, int num_rows, int hidden, const float* w,
             float eps, float* out32, bf16_bits* out16, cudaStream_t stream) {
  if (num_rows <= 0) return;
  RmsNormKernel<<<num_rows, 256, 0, stream>>>(x, rows, hidden, w, eps, out32, out16);
}

void AddResidual(float* h, const float* a, const float* bias, int num_tokens, int n,
                 cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(num_tokens) * n;
  if (total <= 0) return;
  AddResidualKernel<<<ElementwiseBlocks(total), 256, 0, stream>>>(h, a, bias, total, n);
}

void AddBias(float* x, const float* bias, int num_tokens, int n, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(num_tokens) * n;
  if (total <= 0) return;
  AddBiasKernel<<<ElementwiseBlocks(total), 256, 0, stream>>>(x, bias, total, n);
}

void QkvRopeStore(const float* qkv, const float* bias, int num_q_heads, Rope rope,
                  const TokenLayout& tokens, KvLayer kv, float* q_out, cudaStream_t stream) {
  if (tokens.num_tokens <= 0) return;
  if (kv.head_dim <= 0 || kv.head_dim % 2 != 0 || kv.head_dim > 256 || num_q_heads <= 0 ||
      kv.num_kv_heads <= 0 || tokens.block_size <= 0) {
    detail::ReportBadArguments(stream);
    return;
  }
  QkvRopeStoreKernel<<<tokens.num_tokens, 256, 0, stream>>>(qkv, bias, num_q_heads, rope, tokens,
                                                            kv, q_out);
}

void RouterTopK(const float* logits, int num_tokens, int num_experts, int top_k, int32_t* ids,
                float* weights, cudaStream_t stream) {
  if (num_tokens <= 0) return;
  if (num_experts <= 0 || num_experts > kMaxExperts || top_k <= 0 || top_k > kMaxTopK ||
      top_k > num_experts) {
    detail::ReportBadArguments(stream);
    return;
  }
  const int blocks = (num_tokens + kRouterWarps - 1) / kRouterWarps;
  RouterTopKKernel<<<blocks, 32 * kRouterWarps, 0, stream>>>(logits, num_tokens, num_experts,
                                                             top_k, ids, weights);
}

}  // namespace mxserve::kernels::cuda::dense
