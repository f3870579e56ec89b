// The prefill grouped GEMM with the weights through shared memory (wgmma SS, sm_90a): paths 12,
// 13, 14 (MXSERVE_PLAN path=wgmmass / wgmmass192 / wgmmass64: 128- / 192- / 64-row token
// tiles). Correct on the GPU (run_all.sh ss) but slower than the register-A kernel at every
// token count measured (512 .. 16384), so not in kAuto: the dequant warps bound it (WGMMA.md,
// "Next", 0).
//
// Why: in the register-A kernel (wgmma_ldg.cu, ../moe_cuda_wgmma_tma.cu) every consumer warp decodes its own weights
// between its wgmma groups, and the accumulators of one m64 x N block cap the warpgroups per SM.
// Here the roles split: tokens are the A operand (m64 per consumer warpgroup, TMA slabs as in
// the other kernel), weights the B operand (N = 128 weight rows per CTA), decoded once per CTA
// by dequant warps into a shared-memory ring in the same K-major 128-byte-swizzled layout that
// TMA writes (one stmatrix per k32 block and 8-row group); the consumers only wait and issue wgmma.
//
// CTA (128 (KW + kDw) threads): warpgroups 0 .. KW-1 consume (token rows 64 w .. 64 w + 63 of
// the tile; accumulators 64 x 128 fp32 each), kDw warpgroups decode (4 / kDw weight row groups of
// 8 per warp), and the first dequant warp's lane 0 also issues the activation TMA (a producer
// warp of its own would leave KW = 3 80 registers). KW = 3 decodes each weight once for 1.5 times
// the tokens of KW = 2. Per 64-K slab s: the token slab fills A[s] (full_a), the dequant warps
// write B[s] and arrive on full_b after a proxy fence (generic-proxy stores, read by the async
// proxy), each consumer warp releases both through empty[s] once its wgmma group of the slab has
// completed. K is in plain order on both sides (the gather's plain_k, the gate_up epilogue's
// down operand). Every output is one fp32 sum in a fixed K order: deterministic.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <cstdint>

#include "kernels/cuda/lab/lab_kernels.h"
#include "kernels/cuda/moe_cuda_gemm.cuh"
#include "kernels/cuda/moe_cuda_launch.h"
#include "kernels/cuda/moe_cuda_swizzle.h"
#include "kernels/cuda/moe_cuda_tma.h"
#include "kernels/cuda/moe_cuda_wgmma_common.cuh"
#include "kernels/cuda/moe_cuda_wgmma_rs.cuh"

namespace mxserve::kernels::cuda::internal {
namespace {

// KW consumer warpgroups (1, 2 or 3): 64 KW token rows per CTA (wgmma M), one tile of the routing;
// KW = 1 runs two CTAs per SM (few tokens per expert: the weights' stream decides).
constexpr int kSsRows = 128;    // weight rows per CTA (wgmma N)
constexpr int kSsStages = 4;
constexpr uint32_t kSsSlabB = kSsRows * 128;  // bytes of one B stage (128 weight rows x 64 bf16)
template <int KW>
struct SsShape {
  static constexpr int kTokens = 64 * KW;
  static constexpr uint32_t kSlabA = kTokens * 128;  // bytes of one A stage
  // Dequant warpgroups: with one, each dequant warp issued about once per 8 cycles and the
  // consumers waited (the first GPU profile), so two where the registers allow it.
  static constexpr int kDw = KW == 1 ? 1 : 2;
  static constexpr int kRg = 4 / kDw;  // 8-row weight groups per dequant warp
  static constexpr int kThreads = 128 * (KW + kDw);  // consumers, dequant (its first lane issues the token TMA)
  // Weight chunks the dequant warps load ahead.
  static constexpr int kPf = 2;
  static constexpr int kCtas = KW == 1 ? 2 : 1;  // per SM (__launch_bounds__)
  static constexpr size_t kStages = size_t(kSsStages) * (kSlabA + kSsSlabB);
  static constexpr size_t kSmem = kStages + 1024;
  static_assert(size_t(kTokens) * (kSsRows + 4) * 4 <= kStages, "the epilogue tile reuses the stages");
  static_assert(kCtas * kSmem <= (227u << 10), "kCtas CTAs per SM must fit");
};

// ---- operands (the register-A kernel writes these out itself: the comment at its tile read) ---
// Tile `tile` of the routing's list: held expert, first row, rows; false past the device count.
struct WgmmaTile {
  int e, row0, rows;
};
__device__ __forceinline__ bool ReadWgmmaTile(const GemmArgs& p, int tile, WgmmaTile& t) {
  if (tile >= __ldg(p.ntiles)) return false;
  t.e = __ldg(p.tiles + 3 * tile);
  t.row0 = __ldg(p.tiles + 3 * tile + 1);
  t.rows = __ldg(p.tiles + 3 * tile + 2);
  return true;
}

// One expert's weights in the upload layout: its blocks and scales, the bytes of one 8-row group
// (4 kp), and its 8-row groups (n / 8).
struct ExpertGroups {
  const uint8_t* q;
  const uint8_t* sc;
  int64_t rg_bytes;
  int groups;
};
__device__ __forceinline__ ExpertGroups ExpertGroupsOf(const GemmArgs& p, int e) {
  ExpertGroups w;
  w.groups = p.n >> 3;
  w.rg_bytes = int64_t(4) * p.kp;
  w.q = p.q + int64_t(e) * w.groups * w.rg_bytes;
  w.sc = p.sc + int64_t(e) * w.groups * p.chunks * 32;
  return w;
}

// Chunk c of 8-row group rg of the expert: this lane's 16 bytes (8 in the 64-K tail chunk,
// upper half zero) and its row's scale word; zeros and neutral scales past the matrix.
__device__ __forceinline__ void LoadGroupChunk(const GemmArgs& p, const ExpertGroups& w, int rg, int c, int lane,
                                               uint4& q, uint32_t& sc) {
  if (rg < w.groups) {
    const uint8_t* base = w.q + rg * w.rg_bytes + int64_t(c) * 512;
    if (c < p.nfull) {
      q = LdStream16(base + lane * 16);
    } else {
      const uint2 v = LdStream8(base + lane * 8);
      q = make_uint4(v.x, v.y, 0, 0);
    }
    sc = __ldg(reinterpret_cast<const uint32_t*>(w.sc + (int64_t(rg) * p.chunks + c) * 32 + (lane >> 2) * 4));
  } else {
    q = make_uint4(0, 0, 0, 0);
    sc = 0x7F7F7F7Fu;
  }
}

// (WgmmaSs128 is in moe_cuda_wgmma_rs.cuh.)
__device__ __forceinline__ void FenceProxyAsync() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
// Four 8 x 8 bf16 matrices, register i of every lane into matrix i (mma fragment order); lane l
// names row l % 8 of matrix l / 8.
__device__ __forceinline__ void StMatrixX4(uint32_t addr, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(r[0]),
               "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}

template <int KW, bool kGateUp, bool kOneMul>
__global__ void __launch_bounds__(SsShape<KW>::kThreads, SsShape<KW>::kCtas)
    WgmmaSsKernel(const __grid_constant__ CUtensorMap tmap, const GemmArgs p) {
  extern __shared__ uint8_t smem_raw[];
  __shared__ __align__(8) uint64_t full_a[kSsStages], full_b[kSsStages], empty[kSsStages];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint8_t* sa = smem;                                    // A stages (tokens)
  uint8_t* sb = smem + kSsStages * SsShape<KW>::kSlabA;  // B stages (decoded weights)

  WgmmaTile tl;
  if (!ReadWgmmaTile(p, blockIdx.y, tl)) return;
  const int e = tl.e, row0 = tl.row0, rows = tl.rows;
  const int nslabs = p.kp / 64;
  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < kSsStages; ++s) {
      MbarInit(&full_a[s], 1);
      MbarInit(&full_b[s], 128 * SsShape<KW>::kDw);
      MbarInit(&empty[s], 4 * KW);  // lane 0 of each consumer warp
    }
    FenceMbarInit();
  }
  __syncthreads();

  const int wg = threadIdx.x >> 7, lane = threadIdx.x & 31;
  constexpr int kRg = SsShape<KW>::kRg;
  if (wg >= KW) {  // dequant warps: weight rows [n0, n0 + 128) of expert e into B[s]
    const int warp = (threadIdx.x - 128 * KW) >> 5;  // 0 .. 4 kDw - 1
    const ExpertGroups wts = ExpertGroupsOf(p, e);
    const int rgl0 = kRg * warp;                          // this warp's local row groups: rgl0 + j, j < kRg
    const int rg0 = blockIdx.x * (kSsRows / 8) + rgl0;
    auto load_chunk = [&](int c, uint4 (&q)[kRg], uint32_t (&sc)[kRg]) {
#pragma unroll
      for (int j = 0; j < kRg; ++j) LoadGroupChunk(p, wts, rg0 + j, c, lane, q[j], sc[j]);
    };
    const uint32_t off[2] = {SsStmatrixOffset(lane, 0), SsStmatrixOffset(lane, 1)};
    const bool tma = warp == 0 && lane == 0;  // also the token slabs' producer (a warp of its own costs registers)
    if (tma) PrefetchTensorMap(&tmap);
    const uint32_t sb_base = SmemAddr(sb);
    constexpr int kPf = SsShape<KW>::kPf;
    // Chunk c's words live in register slot c % (kPf + 1) (the loop is unrolled by kPf + 1
    // so that every slot index is a constant).
    uint4 qr[kPf + 1][kRg];
    uint32_t sr[kPf + 1][kRg];
#pragma unroll
    for (int d = 0; d < kPf; ++d)
      if (d < p.chunks) load_chunk(d, qr[d], sr[d]);
    for (int c0 = 0; c0 < p.chunks; c0 += kPf + 1) {
#pragma unroll
      for (int d = 0; d <= kPf; ++d) {
        const int c = c0 + d;
        if (c < p.chunks) {
          if (c + kPf < p.chunks) load_chunk(c + kPf, qr[(d + kPf) % (kPf + 1)], sr[(d + kPf) % (kPf + 1)]);
          const int halves = c < p.nfull ? 2 : 1;  // 64-K slabs in this chunk
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            if (hh < halves) {
              const int i = 2 * c + hh, s = i % kSsStages;
              MbarWait(&empty[s], ((i / kSsStages) & 1) ^ 1);
              if (tma) IssueTokenSlab<SsShape<KW>::kSlabA>(&tmap, sa, full_a, s, i, row0);
              const uint32_t stage = sb_base + s * kSsSlabB + rgl0 * 1024;  // 8 rows x 128 bytes per group
#pragma unroll
              for (int j = 0; j < kRg; ++j) {
#pragma unroll
                for (int bb = 0; bb < 2; ++bb) {
                  const int b = 2 * hh + bb;  // k32 block within the chunk
                  const uint4& qq = qr[d][j];
                  const uint32_t w = b == 0 ? qq.x : b == 1 ? qq.y : b == 2 ? qq.z : qq.w;
                  uint32_t r[4];
                  DecodeScaled<kOneMul>(w, sr[d][j], b, r);
                  StMatrixX4(stage + j * 1024 + off[bb], r);
                }
              }
              FenceProxyAsync();
              MbarArrive(&full_b[s]);
            }
          }
        }
      }
    }
    return;
  }

  // Consumers: token rows 64 wg .. 64 wg + 63 of the tile x the CTA's 128 weight rows.
  float acc[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = 0.f;
  const uint32_t sa_base = SmemAddr(sa) + wg * 64 * 128, sb_base = SmemAddr(sb);
  for (int i = 0; i < nslabs; ++i) {
    const int s = i % kSsStages;
    const uint32_t par = (i / kSsStages) & 1;
    MbarWait(&full_a[s], par);
    MbarWait(&full_b[s], par);
    WgmmaFence();
#pragma unroll
    for (int st = 0; st < 4; ++st) {
      WgmmaSs128(acc, SmemDesc(sa_base + s * SsShape<KW>::kSlabA + st * 32),
                 SmemDesc(sb_base + s * kSsSlabB + st * 32));
    }
    WgmmaCommit();
    WgmmaWait<1>();
    // This warp's part of slab i - 1's group has completed: release its stages (every consumer
    // warp arrives, so a stage is refilled only once all 4 KW have waited).
    if (i > 0 && lane == 0) MbarArrive(&empty[(i - 1) % kSsStages]);
  }
  WgmmaWait<0>();

  // Epilogue: every slab was consumed (so every stage write and copy has landed) and, past the
  // named barrier, every wgmma of every consumer warpgroup has completed: the stages hold the
  // fp32 tile.
  float* tileb = reinterpret_cast<float*>(smem);
  asm volatile("bar.sync 1, %0;" ::"n"(128 * KW) : "memory");
  const int warp = (threadIdx.x >> 5) & 3, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int i = 0; i < 16; ++i)
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int x = 0; x < 2; ++x)
        tileb[TileIdx<kSsRows>(64 * wg + 16 * warp + g + 8 * h, 8 * i + 2 * t + x)] = acc[4 * i + 2 * h + x];
  asm volatile("bar.sync 1, %0;" ::"n"(128 * KW) : "memory");
  StoreTile<SsShape<KW>::kTokens, kSsRows, 128 * KW, false, kGateUp>(tileb, p, e, row0, rows, blockIdx.x * kSsRows,
                                                                     threadIdx.x, nullptr, nullptr, nullptr);
}

template <int KW, bool kGateUp, bool kOneMul>
void LaunchSsT(const CUtensorMap& map, const GemmArgs& a, int max_tiles, cudaStream_t stream) {
  using Sh = SsShape<KW>;
  constexpr auto kern = WgmmaSsKernel<KW, kGateUp, kOneMul>;
  RaiseSmemOnce<kern>(int(Sh::kSmem));
  dim3 grid((a.n + kSsRows - 1) / kSsRows, max_tiles);
  kern<<<grid, Sh::kThreads, Sh::kSmem, stream>>>(map, a);
}

template <int KW>
int LaunchSsKw(const GemmArgs& a, bool gate_up, bool one_mul, int max_tiles, cudaStream_t stream) {
  CUtensorMap map;
  if (const int r = EncodeActivationSlabs(a, SsShape<KW>::kTokens, &map); r != 0) return r;
  if (gate_up) {
    one_mul ? LaunchSsT<KW, true, true>(map, a, max_tiles, stream) : LaunchSsT<KW, true, false>(map, a, max_tiles, stream);
  } else {
    one_mul ? LaunchSsT<KW, false, true>(map, a, max_tiles, stream)
            : LaunchSsT<KW, false, false>(map, a, max_tiles, stream);
  }
  return 0;
}

}  // namespace

int LaunchWgmmaSsGemm(const GemmArgs& a, bool gate_up, bool one_mul, int tokens, int max_tiles, cudaStream_t stream) {
  if (a.rows <= 0) return 0;
  return tokens == 192  ? LaunchSsKw<3>(a, gate_up, one_mul, max_tiles, stream)
         : tokens == 64 ? LaunchSsKw<1>(a, gate_up, one_mul, max_tiles, stream)
                        : LaunchSsKw<2>(a, gate_up, one_mul, max_tiles, stream);
}

}  // namespace mxserve::kernels::cuda::internal
