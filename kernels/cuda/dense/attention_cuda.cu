// PagedAttention (dense_cuda.h): one CTA per (token, kv head, head sub-group, key split). The CTA
// streams its token's visible keys from the paged bf16 cache in tiles of kv tile_keys rows into
// shared memory (as fp32), scores them for the query heads sharing the kv head, and keeps an
// online softmax (running max and sum in fp32, the running max starting at the sink's logit).
// With more than one split per token (too few CTAs otherwise: decode over long contexts) each
// CTA writes its partial (max, sum, unnormalised output) to a workspace and CombineKernel merges
// them (flash-decoding).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>

#include "kernels/cuda/dense/dense_cuda.h"
#include "kernels/cuda/dense/dense_util.cuh"

namespace mxserve::kernels::cuda::dense {
namespace {

using detail::Bf16Float;
using detail::Bf16Rn;

constexpr int kThreads = 128;
constexpr int kMaxHeadDim = 256;
// Bounds on one CTA's query heads: gs * d floats of q and output, gs * tile_keys scores (so gs
// <= kMaxScores / 16 = kMaxGs). With tile_keys = clamp(4096 / d, 16, 64) the shared memory
// (SmemBytes) stays under 48 KiB for every d <= 256.
constexpr int kMaxGroupElems = 1024, kMaxScores = 2048, kMaxGs = kMaxScores / 16;
// Split only when fewer items than this many per SM would run; the workspace holds at most twice
// this many items (nsplit = ceil(target / items) adds less than one `items`).
constexpr int kTargetCtasPerSm = 4;
constexpr int kMaxSplits = 128;

struct AttnArgs {
  const float* q;
  int nq, nkv, d, group, gs, ngroups, tile_keys, nsplit;
  TokenLayout tl;
  const uint16_t* k;
  const uint16_t* v;
  const float* sinks;
  int window;
  float scale;
  uint16_t* out;
  float* part_acc;  // [items, nsplit, gs, d] when nsplit > 1
  float* part_ml;   // [items, nsplit, gs, 2]
};

__device__ __forceinline__ float4 Load4Bf16(const uint16_t* p) {
  const uint2 u = *reinterpret_cast<const uint2*>(p);
  return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u),
                     __uint_as_float(u.y << 16), __uint_as_float(u.y & 0xffff0000u));
}

__device__ __forceinline__ float Dot4(float4 a, float4 b, float acc) {
  return fmaf(a.w, b.w, fmaf(a.z, b.z, fmaf(a.y, b.y, fmaf(a.x, b.x, acc))));
}

// Shared memory, in floats: q [gs][d], K and V tiles [tile_keys][d + 4] (the pad keeps 16-byte
// reads of different rows on different banks), scores [gs][tile_keys], m, l, alpha [gs].
struct Smem {
  float *q, *k, *v, *p, *m, *l, *alpha;
  __device__ Smem(float* base, int gs, int d, int nk) {
    q = base;
    k = q + gs * d;
    v = k + nk * (d + 4);
    p = v + nk * (d + 4);
    m = p + gs * nk;
    l = m + gs;
    alpha = l + gs;
  }
};

size_t SmemBytes(int gs, int d, int nk) {
  return sizeof(float) * (static_cast<size_t>(gs) * d + 2 * nk * (d + 4) + gs * nk + 3 * gs);
}

// Loads keys [kb, kb + nk) ∩ [kb, kend) of the token's sequence into s.k, s.v (zeros past kend).
__device__ void LoadTile(const AttnArgs& a, const Smem& s, int seq, int kvh, int kb, int kend) {
  const int d4 = a.d / 4, ld = a.d + 4;
  const int32_t* bt = a.tl.block_tables + static_cast<int64_t>(seq) * a.tl.max_blocks;
  for (int idx = threadIdx.x; idx < a.tile_keys * d4; idx += kThreads) {
    const int j = idx / d4, c = (idx % d4) * 4, kp = kb + j;
    float4 kk = make_float4(0.f, 0.f, 0.f, 0.f), vv = kk;
    if (kp < kend) {
      const int64_t row = static_cast<int64_t>(bt[kp / a.tl.block_size]) * a.tl.block_size +
                          kp % a.tl.block_size;
      const int64_t off = (row * a.nkv + kvh) * a.d + c;
      kk = Load4Bf16(a.k + off);
      vv = Load4Bf16(a.v + off);
    }
    *reinterpret_cast<float4*>(&s.k[j * ld + c]) = kk;
    *reinterpret_cast<float4*>(&s.v[j * ld + c]) = vv;
  }
}

// s.p[h][j] = scale * q_h . k_j (-inf past kend); each thread one key and up to 4 heads.
__device__ void ScoreTile(const AttnArgs& a, const Smem& s, int kb, int kend) {
  const int nk = a.tile_keys, ld = a.d + 4, quads = (a.gs + 3) / 4;
  for (int u = threadIdx.x; u < nk * quads; u += kThreads) {
    const int j = u % nk, h0 = (u / nk) * 4;
    float dot[4] = {0.f, 0.f, 0.f, 0.f};
    const int nh = min(4, a.gs - h0);
    for (int e = 0; e < a.d; e += 4) {
      const float4 kk = *reinterpret_cast<const float4*>(&s.k[j * ld + e]);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        if (i < nh) {
          dot[i] = Dot4(*reinterpret_cast<const float4*>(&s.q[(h0 + i) * a.d + e]), kk, dot[i]);
        }
      }
    }
    const bool live = kb + j < kend;
    for (int i = 0; i < nh; ++i) s.p[(h0 + i) * nk + j] = live ? dot[i] * a.scale : -INFINITY;
  }
}

// Per head (one warp each in turn): the tile's max, the new running max, exp of the scores
// against it (into s.p), the running sum, and the factor the old output is scaled by.
__device__ void SoftmaxTile(const AttnArgs& a, const Smem& s) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nk = a.tile_keys;
  for (int h = warp; h < a.gs; h += kThreads / 32) {
    float* p = s.p + h * nk;
    float mt = -INFINITY;
    for (int j = lane; j < nk; j += 32) mt = fmaxf(mt, p[j]);
    for (int o = 16; o > 0; o >>= 1) mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, o));
    const float m_old = s.m[h], m_new = fmaxf(m_old, mt);  // finite: the tile's first key is live
    float sum = 0.f;
    for (int j = lane; j < nk; j += 32) {
      const float e = p[j] == -INFINITY ? 0.f : expf(p[j] - m_new);
      p[j] = e;
      sum += e;
    }
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane == 0) {
      const float alpha = m_old == -INFINITY ? 0.f : expf(m_old - m_new);
      s.alpha[h] = alpha;
      s.l[h] = s.l[h] * alpha + sum;
      s.m[h] = m_new;
    }
  }
}

template <int kSlots>
__global__ void __launch_bounds__(kThreads) AttentionKernel(AttnArgs a) {
  extern __shared__ float4 smem4[];
  const Smem s(reinterpret_cast<float*>(smem4), a.gs, a.d, a.tile_keys);
  const int item = blockIdx.x, split = blockIdx.y;
  const int per_token = a.nkv * a.ngroups;
  const int t = item / per_token, kvh = (item % per_token) / a.ngroups, g = item % a.ngroups;
  const int h_first = kvh * a.group + g * a.gs;  // the CTA's first query head
  const int pos = a.tl.positions[t], seq = a.tl.token_seq[t];
  const int lo = a.window > 0 ? max(0, pos - a.window + 1) : 0;
  const int tiles = (pos - lo + a.tile_keys) / a.tile_keys;
  const int span = (tiles + a.nsplit - 1) / a.nsplit * a.tile_keys;
  const int kbegin = lo + split * span, kend = min(pos + 1, kbegin + span);

  const float* qt = a.q + (static_cast<int64_t>(t) * a.nq + h_first) * a.d;
  for (int i = threadIdx.x; i < a.gs * a.d; i += kThreads) s.q[i] = qt[i];
  for (int h = threadIdx.x; h < a.gs; h += kThreads) {
    const bool sink = a.sinks != nullptr && split == 0;
    s.m[h] = sink ? a.sinks[h_first + h] : -INFINITY;
    s.l[h] = sink ? 1.f : 0.f;
  }
  const int d4 = a.d / 4, slots = a.gs * d4;
  float4 acc[kSlots];
#pragma unroll
  for (int i = 0; i < kSlots; ++i) acc[i] = make_float4(0.f, 0.f, 0.f, 0.f);

  for (int kb = kbegin; kb < kend; kb += a.tile_keys) {
    __syncthreads();  // the previous tile's readers are done; q, m, l written
    LoadTile(a, s, seq, kvh, kb, kend);
    __syncthreads();
    ScoreTile(a, s, kb, kend);
    __syncthreads();
    SoftmaxTile(a, s);
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kSlots; ++i) {
      const int slot = threadIdx.x + i * kThreads;
      if (slot < slots) {
        const int h = slot / d4, e = (slot % d4) * 4;
        const float al = s.alpha[h];
        float4 r = make_float4(acc[i].x * al, acc[i].y * al, acc[i].z * al, acc[i].w * al);
        const float* p = s.p + h * a.tile_keys;
        for (int j = 0; j < a.tile_keys; ++j) {
          const float w = p[j];
          const float4 vv = *reinterpret_cast<const float4*>(&s.v[j * (a.d + 4) + e]);
          r.x = fmaf(w, vv.x, r.x);
          r.y = fmaf(w, vv.y, r.y);
          r.z = fmaf(w, vv.z, r.z);
          r.w = fmaf(w, vv.w, r.w);
        }
        acc[i] = r;
      }
    }
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < kSlots; ++i) {
    const int slot = threadIdx.x + i * kThreads;
    if (slot >= slots) continue;
    const int h = slot / d4, e = (slot % d4) * 4;
    if (a.nsplit == 1) {
      const float inv = 1.0f / s.l[h];
      uint16_t* o = a.out + (static_cast<int64_t>(t) * a.nq + h_first + h) * a.d + e;
      o[0] = Bf16Rn(acc[i].x * inv);
      o[1] = Bf16Rn(acc[i].y * inv);
      o[2] = Bf16Rn(acc[i].z * inv);
      o[3] = Bf16Rn(acc[i].w * inv);
    } else {
      const int64_t part = (static_cast<int64_t>(item) * a.nsplit + split) * a.gs + h;
      *reinterpret_cast<float4*>(a.part_acc + part * a.d + e) = acc[i];
      if (e == 0) {
        a.part_ml[part * 2] = s.m[h];
        a.part_ml[part * 2 + 1] = s.l[h];
      }
    }
  }
}

// One CTA per item: out = sum_s acc_s exp(m_s - M) / sum_s l_s exp(m_s - M), M = max_s m_s (the
// sink entered split 0's m and l).
__global__ void CombineKernel(AttnArgs a) {
  const int item = blockIdx.x, per_token = a.nkv * a.ngroups;
  const int t = item / per_token, kvh = (item % per_token) / a.ngroups, g = item % a.ngroups;
  const int h_first = kvh * a.group + g * a.gs;
  for (int x = threadIdx.x; x < a.gs * a.d; x += blockDim.x) {
    const int h = x / a.d, e = x % a.d;
    const int64_t part0 = static_cast<int64_t>(item) * a.nsplit * a.gs + h;
    float mx = -INFINITY;
    for (int sp = 0; sp < a.nsplit; ++sp) mx = fmaxf(mx, a.part_ml[(part0 + sp * a.gs) * 2]);
    float denom = 0.f, num = 0.f;
    for (int sp = 0; sp < a.nsplit; ++sp) {
      const int64_t part = part0 + sp * a.gs;
      const float m = a.part_ml[part * 2];
      const float w = m == -INFINITY ? 0.f : expf(m - mx);
      denom += a.part_ml[part * 2 + 1] * w;
      num += a.part_acc[part * a.d + e] * w;
    }
    a.out[(static_cast<int64_t>(t) * a.nq + h_first + h) * a.d + e] = Bf16Rn(num * (1.0f / denom));
  }
}

int SmCount() {
  int dev = 0, sms = 0;
  cudaGetDevice(&dev);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  return sms > 0 ? sms : 1;
}

// The split workspace of (device, stream): allocated once at its largest size (any shape this
// file accepts: items * nsplit <= 2 * target, gs * (d + 2) <= kMaxGroupElems + 2 * kMaxGs floats
// each: about 5 MiB on 132 SMs) and never freed, so that a captured graph's pointer stays valid. Null when it cannot be
// allocated now (during stream capture: cudaMalloc is not allowed then); the caller then runs
// without splitting.
float* SplitWorkspace(cudaStream_t stream, size_t floats_needed) {
  static std::mutex mu;
  static std::map<std::pair<int, cudaStream_t>, float*> buffers;
  int dev = 0;
  cudaGetDevice(&dev);
  std::lock_guard<std::mutex> lock(mu);
  auto it = buffers.find({dev, stream});
  if (it != buffers.end()) return it->second;
  cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &cap) != cudaSuccess || cap != cudaStreamCaptureStatusNone) {
    return nullptr;
  }
  // Relaxed for this call: another thread's global-mode capture would otherwise be broken by it.
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  cudaThreadExchangeStreamCaptureMode(&mode);
  float* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, floats_needed * sizeof(float));
  cudaThreadExchangeStreamCaptureMode(&mode);
  if (e != cudaSuccess) {
    cudaGetLastError();  // not the caller's error: the launch goes on without splitting
    return nullptr;
  }
  buffers[{dev, stream}] = p;
  return p;
}

size_t WorkspaceFloats() {
  return static_cast<size_t>(2 * kTargetCtasPerSm * SmCount()) * (kMaxGroupElems + 2 * kMaxGs);
}

}  // namespace

bool ReserveAttentionWorkspace(cudaStream_t stream) {
  return SplitWorkspace(stream, WorkspaceFloats()) != nullptr;
}

void PagedAttention(const float* q, int num_q_heads, const TokenLayout& tokens, KvLayer kv,
                    const float* sinks, int window, float scale, bf16_bits* out,
                    cudaStream_t stream) {
  const int T = tokens.num_tokens, nq = num_q_heads, nkv = kv.num_kv_heads, d = kv.head_dim;
  if (T <= 0) return;
  if (d <= 0 || d % 4 != 0 || d > kMaxHeadDim || nkv <= 0 || nq <= 0 || nq % nkv != 0 ||
      tokens.block_size <= 0 || tokens.max_blocks <= 0) {
    detail::ReportBadArguments(stream);
    return;
  }
  AttnArgs a{};
  a.q = q;
  a.nq = nq;
  a.nkv = nkv;
  a.d = d;
  a.group = nq / nkv;
  a.tile_keys = std::clamp(4096 / d, 16, 64);
  a.gs = 1;  // the largest divisor of the group within the CTA's bounds
  for (int gs = a.group; gs >= 1; --gs) {
    if (a.group % gs == 0 && gs * d <= kMaxGroupElems && gs * a.tile_keys <= kMaxScores) {
      a.gs = gs;
      break;
    }
  }
  a.ngroups = a.group / a.gs;
  a.tl = tokens;
  a.k = kv.k;
  a.v = kv.v;
  a.sinks = sinks;
  a.window = window;
  a.scale = scale;
  a.out = out;

  // Splits: enough CTAs for kTargetCtasPerSm per SM, each split at least two tiles of the
  // longest context the block tables can describe (or of the window).
  const int64_t items = static_cast<int64_t>(T) * nkv * a.ngroups;
  const int64_t target = static_cast<int64_t>(kTargetCtasPerSm) * SmCount();
  int64_t max_ctx = static_cast<int64_t>(tokens.max_blocks) * tokens.block_size;
  if (window > 0) max_ctx = std::min<int64_t>(max_ctx, window);
  int64_t nsplit = 1;
  if (items < target) {
    nsplit = std::min<int64_t>({(target + items - 1) / items, kMaxSplits,
                                std::max<int64_t>(1, max_ctx / (2 * a.tile_keys))});
  }
  if (nsplit > 1) {
    float* ws = SplitWorkspace(stream, WorkspaceFloats());
    if (ws == nullptr) {
      nsplit = 1;
    } else {
      a.part_acc = ws;
      a.part_ml = ws + static_cast<size_t>(items) * nsplit * a.gs * d;
    }
  }
  a.nsplit = static_cast<int>(nsplit);
  const size_t smem = SmemBytes(a.gs, d, a.tile_keys);
  const dim3 grid(static_cast<unsigned>(items), static_cast<unsigned>(nsplit));
  if (a.gs * d <= kThreads * 4) {
    AttentionKernel<1><<<grid, kThreads, smem, stream>>>(a);
  } else {
    AttentionKernel<2><<<grid, kThreads, smem, stream>>>(a);
  }
  if (nsplit > 1) CombineKernel<<<static_cast<unsigned>(items), kThreads, 0, stream>>>(a);
}

}  // namespace mxserve::kernels::cuda::dense
