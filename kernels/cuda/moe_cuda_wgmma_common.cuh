// What the two wgmma GEMMs share (moe_cuda_wgmma_tma.cu and lab/wgmma_ldg.cu: weights from registers, the A operand;
// lab/wgmma_ss.cu: weights through shared memory, the B operand): the wgmma PTX wrappers,
// the shared-memory descriptor, the token-slab producer and the epilogue from an fp32 tile in
// shared memory. (The tile read and the weight-chunk load are written out in each kernel: shared,
// ptxas emitted slower code for the register-A kernel; the comment at its tile read.) Private to
// kernels/cuda; sm_90a only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/moe_cuda_gemm.cuh"
#include "kernels/cuda/moe_cuda_launch.h"
#include "kernels/cuda/moe_cuda_tma.h"

namespace mxserve::kernels::cuda::internal {
namespace {

// ---- PTX wrappers (sm_90a) ------------------------------------------------------------------
// (the mbarrier and bulk-copy wrappers are in moe_cuda_gemm.cuh)
__device__ __forceinline__ void WgmmaFence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void WgmmaCommit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void WgmmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Shared-memory matrix descriptor: K-major, 128-byte swizzle, 8-row groups 1024 bytes apart. The
// high word is the same for every address; the low word holds the address in 16-byte units, so a
// loop may offset one low word computed once (the register-A GEMM's main loop does).
inline constexpr uint32_t kSmemDescHi = (1024 >> 4) | (1u << 30);  // stride 1024 bytes, 128-byte swizzle
__device__ __forceinline__ uint32_t SmemDescLo(uint32_t addr) { return ((addr & 0x3FFFF) >> 4) | (1u << 16); }
__device__ __forceinline__ uint64_t SmemDescOf(uint32_t lo) { return (uint64_t(kSmemDescHi) << 32) | lo; }
__device__ __forceinline__ uint64_t SmemDesc(uint32_t addr) { return SmemDescOf(SmemDescLo(addr)); }

// ---- the token operand ------------------------------------------------------------------------
// Slab i of the tile's token rows into stage s of `stages` (kStageBytes each), completing on
// full[s] (one thread; the stage must be free).
template <uint32_t kStageBytes>
__device__ __forceinline__ void IssueTokenSlab(const CUtensorMap* tmap, uint8_t* stages, uint64_t* full, int s,
                                               int i, int row0) {
  MbarExpectTx(&full[s], kStageBytes);
  TmaLoad2d(stages + s * kStageBytes, tmap, &full[s], i * 64, row0);
}
__device__ __forceinline__ void PrefetchTensorMap(const CUtensorMap* tmap) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(tmap)) : "memory");
}

// The producer's loop (one thread): slab i into stage i % S once empty[s] has released the slab
// S before it.
template <int S, uint32_t kStageBytes>
__device__ __forceinline__ void ProduceTokenSlabs(const CUtensorMap* tmap, uint8_t* stages, uint64_t* full,
                                                  uint64_t* empty, int nslabs, int row0) {
  PrefetchTensorMap(tmap);
  for (int i = 0; i < nslabs; ++i) {
    const int s = i % S;
    MbarWait(&empty[s], ((i / S) & 1) ^ 1);
    IssueTokenSlab<kStageBytes>(tmap, stages, full, s, i, row0);
  }
}

// ---- register split (the register-A kernels of moe_cuda_wgmma_tma.cu and lab/wgmma_ldg.cu) ----
// NC consumer warpgroups and one producer warpgroup; setmaxnreg moves the producer's registers
// to the consumers. The CTA holds what it was launched with (LaunchRegs per thread, from
// __launch_bounds__), so the consumers may grow only by what the producer gave back: asking for
// more blocks setmaxnreg.inc forever (NC = 2: 168 -> 40 / 232, 3: 128 -> 40 / 152, 4: 96 -> 24 / 112;
// 5: 80 -> 24 / 88, 6: 72 -> 24 / 80; CB = 2 CTAs per SM, NC = 2: 80 -> 24 / 104). ptxas, though, compiles every warp within
// LaunchRegs, whatever setmaxnreg grants later: that bound is what decides spills (WGMMA.md).
template <int NC, int CB>
constexpr int LaunchRegs() { return 65536 / (128 * (NC + 1) * CB) / 8 * 8; }
template <int NC, int CB>
constexpr int ProducerRegs() { return NC >= 4 || CB > 1 ? 24 : 40; }
// P: what the producer keeps (the persistent TMA kernel's loops over items keep 40).
template <int NC, int CB, int P = ProducerRegs<NC, CB>()>
constexpr int ConsumerRegs() {
  const int r = (LaunchRegs<NC, CB>() + (LaunchRegs<NC, CB>() - P) / NC) / 8 * 8;
  return r > 232 ? 232 : r;
}
static_assert(ConsumerRegs<2, 1>() == 232 && ConsumerRegs<3, 1>() == 152 && ConsumerRegs<4, 1>() == 112 &&
              ConsumerRegs<5, 1>() == 88 && ConsumerRegs<6, 1>() == 80 && ConsumerRegs<2, 2>() == 104);

// ---- epilogue ---------------------------------------------------------------------------------
// The epilogue's operands into shared memory at the CTA's start, by the producer warpgroup's
// three idle warps (h = 0 ... 95): the kCols weight rows' bias from n0 on and, for down, each
// token row's slot id and routing weight (rows past `rows`: 0). They then arrive on `epi_bar`
// (count 96), on which the consumers wait before the epilogue.
template <int BN, int kCols, bool kGateUp>
__device__ __forceinline__ void FetchEpilogueOperands(const GemmArgs& p, int e, int row0, int rows, int n0, int h,
                                                      float* s_bias, int32_t* s_pair, float* s_w,
                                                      uint64_t* epi_bar) {
  for (int i = h; i < kCols; i += 96) s_bias[i] = n0 + i < p.n ? __ldg(p.bias + int64_t(e) * p.n + n0 + i) : 0.f;
  if constexpr (!kGateUp) {
    for (int i = h; i < BN; i += 96) {
      const int pair = i < rows ? __ldg(p.sorted + row0 + i) : 0;
      s_pair[i] = pair;
      s_w[i] = i < rows ? __ldg(p.route_w + pair) : 0.f;
    }
  }
  MbarArrive(epi_bar);
}

// gpt-oss SwiGLU of a biased (gate, up) pair, as the wgmma epilogues compute it (gate clamped
// above, up both ways, at limit). The sigmoid's reciprocal is the approximate one (MUFU.RCP, 2 ulp,
// far below the bf16 rounding of the output): the IEEE 1.0f / x was a called subroutine, about 20
// instructions per output and 9 % of the persistent kernel's instructions at 16384 tokens.
__device__ __forceinline__ float SwigluOf(float gate, float up, float alpha, float limit) {
  const float gt = fminf(gate, limit);
  const float u = fminf(fmaxf(up, -limit), limit);
  return (u + 1.0f) * gt * __fdividef(1.0f, 1.0f + expf(-alpha * gt));
}

// The fp32 tile [token col][local weight row nl] (kCols weight rows) in shared memory: a
// float4-level XOR swizzle and a 4-word row pad, so that neither the accumulator fragments'
// writes nor the row-wise reads conflict on banks.
template <int kCols>
__device__ __forceinline__ int TileIdx(int col, int nl) {
  const int f = nl >> 2;
  return col * (kCols + 4) + ((f ^ ((f >> 3) & 7)) << 2) + (nl & 3);
}

// One m64 block's accumulators (wgmma's fp32 fragments: acc[4i + 2h + x] is weight row nb + 8h,
// token column 8i + 2t + x, with nb = the block's first row + 16 warp + g) into the tile.
template <int BN, int kCols>
__device__ __forceinline__ void WriteAccTile(float* tileb, const float (&acc)[BN / 2], int nb, int t) {
#pragma unroll
  for (int i = 0; i < BN / 8; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int x = 0; x < 2; ++x) tileb[TileIdx<kCols>(8 * i + 2 * t + x, nb + 8 * h)] = acc[4 * i + 2 * h + x];
}

// From the tile (complete and visible to the kThreads threads calling this, numbered by tid)
// to global memory, 16-byte stores contiguous along each token's output row. gate_up (kGateUp):
// bias + SwiGLU of the interleaved gate/up rows into the down operand (bf16, plain K order);
// down: bias x routing weight into the slot's fp32 row of y. Token cols >= rows and weight rows
// past p.n are skipped. kEpi: bias (s_bias [kCols]), slot ids and routing weights (s_pair,
// s_w [BN]) were fetched into shared memory already; else they are read from global here.
template <int BN, int kCols, int kThreads, bool kEpi, bool kGateUp>
__device__ __forceinline__ void StoreTile(const float* tileb, const GemmArgs& p, int e, int row0, int rows, int n0,
                                          int tid, const float* s_bias, const int32_t* s_pair, const float* s_w) {
  const float* be = p.bias + int64_t(e) * p.n + n0;
  // Bias of local weight row i (4 consecutive, 16-byte aligned).
  auto bias4 = [&](int i) {
    if constexpr (kEpi) return *reinterpret_cast<const float4*>(s_bias + i);
    return __ldg(reinterpret_cast<const float4*>(be + i));
  };
  if constexpr (kGateUp) {
    // Item: (token, 8 consecutive outputs = 16 interleaved gate/up rows) -> one 16-byte store.
    constexpr int kPer = kCols / 16;
    for (int it = tid; it < BN * kPer; it += kThreads) {
      const int col = it / kPer, q = it - col * kPer;
      if (col >= rows || n0 + 16 * q >= p.n) continue;
      uint32_t packed[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const float4 v = *reinterpret_cast<const float4*>(tileb + TileIdx<kCols>(col, 16 * q + 4 * u));
        const float4 b = bias4(16 * q + 4 * u);
        float r2[2];
        const float gs[2] = {v.x + b.x, v.z + b.z}, us[2] = {v.y + b.y, v.w + b.w};
#pragma unroll
        for (int z = 0; z < 2; ++z) r2[z] = SwigluOf(gs[z], us[z], p.alpha, p.limit);
        packed[u] = uint32_t(F2Bf16(r2[0])) | (uint32_t(F2Bf16(r2[1])) << 16);
      }
      *reinterpret_cast<uint4*>(p.act + int64_t(row0 + col) * p.kp_out + (n0 >> 1) + 8 * q) =
          make_uint4(packed[0], packed[1], packed[2], packed[3]);
    }
  } else {
    constexpr int kPer = kCols / 4;
    for (int it = tid; it < BN * kPer; it += kThreads) {
      const int col = it / kPer, f = it - col * kPer;
      if (col >= rows || n0 + 4 * f >= p.n) continue;
      int pair;
      float w;
      if constexpr (kEpi) {
        pair = s_pair[col];
        w = s_w[col];
      } else {
        pair = __ldg(p.sorted + row0 + col);
        w = __ldg(p.route_w + pair);
      }
      const float4 v = *reinterpret_cast<const float4*>(tileb + TileIdx<kCols>(col, 4 * f));
      const float4 b = bias4(4 * f);
      *reinterpret_cast<float4*>(p.y + int64_t(pair) * p.n + n0 + 4 * f) =
          make_float4(w * (v.x + b.x), w * (v.y + b.y), w * (v.z + b.z), w * (v.w + b.w));
    }
  }
}

// StoreTile's stores straight from one consumer thread's accumulators (the persistent kernel's
// epilogue, no shared tile): weight rows nb and nb + 8 of the kCols from n0 (nb = 64 wg + 16 warp
// + g), token columns 8i + 2t + x. gate_up: row pairs (2j gate, 2j + 1 up) sit in lanes g, g + 1
// (lane ^ 4); one shuffle gives the even lane column 2t's up and the odd lane column 2t + 1's
// gate, and each stores its column's bf16 output j. down: bias x routing weight into y. The whole
// warp must call this (the shuffle); s_bias [kCols], s_pair / s_w [BN] as StoreTile's.
template <int BN, int kCols, bool kGateUp>
__device__ __forceinline__ void StoreAccRegs(const float (&acc)[BN / 2], const GemmArgs& p, int row0, int rows,
                                             int n0, int nb, int t, const float* s_bias, const int32_t* s_pair,
                                             const float* s_w) {
  if constexpr (kGateUp) {
    const bool odd = nb & 1;
    const int xo = odd ? 1 : 0;
    float bg[2], bu[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      bg[h] = s_bias[(nb + 8 * h) & ~1];
      bu[h] = s_bias[(nb + 8 * h) | 1];
    }
#pragma unroll
    for (int i = 0; i < BN / 8; ++i) {
      const int col = 8 * i + 2 * t + xo;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float a0 = acc[4 * i + 2 * h], a1 = acc[4 * i + 2 * h + 1];
        const float other = __shfl_xor_sync(0xFFFFFFFFu, odd ? a0 : a1, 4);
        const int r = n0 + ((nb + 8 * h) & ~1);
        if (col < rows && r < p.n) {
          const float v = SwigluOf((odd ? other : a0) + bg[h], (odd ? a1 : other) + bu[h], p.alpha, p.limit);
          p.act[int64_t(row0 + col) * p.kp_out + (r >> 1)] = F2Bf16(v);
        }
      }
    }
  } else {
    float bias[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) bias[h] = s_bias[nb + 8 * h];
#pragma unroll
    for (int i = 0; i < BN / 8; ++i) {
#pragma unroll
      for (int x = 0; x < 2; ++x) {
        const int col = 8 * i + 2 * t + x;
        if (col >= rows) continue;
        const int pair = s_pair[col];
        const float w = s_w[col];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int r = n0 + nb + 8 * h;
          if (r < p.n) p.y[int64_t(pair) * p.n + r] = w * (acc[4 * i + 2 * h + x] + bias[h]);
        }
      }
    }
  }
}

}  // namespace
}  // namespace mxserve::kernels::cuda::internal
