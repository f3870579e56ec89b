// The TMA-fed register-A wgmma kernels (moe_cuda_wgmma_tma.cu says what they do and why): both
// forms (WgmmaTmaKernel, WgmmaTmaPersistKernel) and their launchers, templates that
// moe_cuda_wgmma_tma.cu instantiates in the forms kAuto runs and kernels/cuda/lab in the others.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <iterator>
#include <type_traits>

#include "kernels/cuda/moe_cuda_gemm.cuh"
#include "kernels/cuda/moe_cuda_launch.h"
#include "kernels/cuda/moe_cuda_tma.h"
#include "kernels/cuda/moe_cuda_variant.h"
#include "kernels/cuda/moe_cuda_wgmma_common.cuh"
#include "kernels/cuda/moe_cuda_wgmma_rs.cuh"

namespace mxserve::kernels::cuda::internal {
namespace {

// NC consumer warpgroups of 64 weight rows each, as the ldg kernel's (lab/wgmma_ldg.cu) default configuration for
// the tile height (32-48 rows: 6, 64: 5, 96 and 128: 4, 192: 3, 256: 2), and its register split
// (ProducerRegs / ConsumerRegs at one CTA per SM).
template <int NC>
constexpr uint32_t TWBytes() { return 8 * NC * 512; }  // a chunk's weights: 8 NC row groups
template <int NC>
constexpr uint32_t TSBytes() { return 8 * NC * 32; }   // their scale words
template <int NC>
constexpr uint32_t TTokOff() { return (TWBytes<NC>() + TSBytes<NC>() + 1023) / 1024 * 1024; }
template <int BN, int NC>
constexpr uint32_t TStageBytes() { return TTokOff<NC>() + 2 * BN * 128; }
// As many stages as fit in 220 KB, at most five.
template <int BN, int NC>
constexpr int TStages() {
  const int s = int((220u << 10) / TStageBytes<BN, NC>());
  return s > 5 ? 5 : s;
}
// Dynamic shared memory (plus 1 KB for the 1024-byte alignment): the stages, and for the one-tile
// kernel the fp32 epilogue tile over them; the persistent kernel's epilogue needs none.
template <int BN, int NC, bool kPersist>
constexpr size_t TSmemBytes() {
  const size_t stages = size_t(TStages<BN, NC>()) * TStageBytes<BN, NC>();
  const size_t epilogue = kPersist ? 0 : size_t(BN) * (64 * NC + 4) * 4;
  return (stages > epilogue ? stages : epilogue) + 1024;
}

// The producer thread's copies for one tile's chunks (its first weight-group row in the maps
// grow, its first token row row0) into the ring at (stage, phase), advanced past them: each chunk
// once every consumer warpgroup has released its stage.
template <int BN, int NC, int S>
__device__ __forceinline__ void ProduceChunks(uint8_t* smem, uint64_t* full_bar, uint64_t* empty_bar,
                                              const CUtensorMap* tmap, const CUtensorMap* wmap,
                                              const CUtensorMap* smap, const GemmArgs& p, int grow, int row0,
                                              int& stage, uint32_t& phase) {
  constexpr uint32_t kStage = TStageBytes<BN, NC>(), kSlab = BN * 128;
  constexpr uint32_t kTWBytes = TWBytes<NC>(), kTSBytes = TSBytes<NC>(), kTTokOff = TTokOff<NC>();
  for (int c = 0; c < p.chunks; ++c) {
    MbarWait(&empty_bar[stage], phase ^ 1);
    const bool full = c < p.nfull;
    uint8_t* base = smem + stage * kStage;
    MbarExpectTx(&full_bar[stage], kTWBytes + kTSBytes + (full ? 2 : 1) * kSlab);
    TmaLoad2d(base, wmap, &full_bar[stage], c * 64, grow);
    TmaLoad2d(base + kTWBytes, smap, &full_bar[stage], c * 4, grow);
    TmaLoad2d(base + kTTokOff, tmap, &full_bar[stage], 2 * c * 64, row0);
    if (full) TmaLoad2d(base + kTTokOff + kSlab, tmap, &full_bar[stage], (2 * c + 1) * 64, row0);
    if (++stage == S) {
      stage = 0;
      phase ^= 1;
    }
  }
}

// One chunk's multiply, its weights and scale words loaded (q, sw: the lane's words of its two row
// groups), its token slabs at descriptor address dlo0: a full 128-K chunk (full: four k32 blocks)
// or the 64-K tail (two). release: the warpgroup's leader arrives on the empty barrier at
// rel_bar() (the previous chunk's stage) once this chunk's first wgmma group (kG blocks) has been
// issued and the group before it has completed. rel_bar is called only then: the address worked
// out before the branch lengthened 20 kernels of heights above 16 rows (scripts/cubin-diff.py).
// kG blocks per wgmma group (one fence, one commit and one wait per group): two in the peeled
// loops (a full chunk is two groups, the tail one) where five or fewer consumer warpgroups leave
// the registers for two groups' A operands (at six, ptxas serializes the wgmma: C7512), else one.
template <int BN, bool kOneMul, int BW, int kG, bool kDesc64 = false, class RelBar>
__device__ __forceinline__ void ChunkMma(float (&acc)[BN / 2], const uint4 (&q)[2], const uint32_t (&sw)[2],
                                         uint32_t dlo0, bool full, bool release, RelBar rel_bar) {
  constexpr uint32_t kSlab = BN * 128;
#pragma unroll
  for (int b0 = 0; b0 < 4; b0 += kG) {
    if (b0 < 2 || full) {
      uint32_t ra[kG][2][4];
#pragma unroll
      for (int i = 0; i < kG; ++i) {
        const int b = b0 + i;
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const uint32_t w = b == 0 ? q[r].x : b == 1 ? q[r].y : b == 2 ? q[r].z : q[r].w;
          DecodeScaledPre<kOneMul>(w, sw[r], b, ra[i][r]);
        }
      }
      WgmmaFence();
#pragma unroll
      for (int i = 0; i < kG; ++i) {
        const int b = b0 + i;
        // Slab b >> 1 of the stage, the k32 block's half (b & 1), the k16 step st: 16-byte units.
        const uint32_t dlo = dlo0 + (b >> 1) * (kSlab >> 4) + (b & 1) * 4;
#pragma unroll
        for (int st = 0; st < 2; ++st) {
          // kDesc64: the step's descriptor as one 64-bit add to the chunk's (one UIADD3.64 a wgmma in
          // place of an add and two moves).
          const uint64_t dd = kDesc64 ? SmemDescOf(dlo0) + ((b >> 1) * (kSlab >> 4) + (b & 1) * 4 + 2 * st)
                                      : SmemDescOf(dlo + 2 * st);
          WgmmaRs<BW>(reinterpret_cast<float(&)[BW / 2]>(acc), ra[i][0][2 * st], ra[i][1][2 * st],
                      ra[i][0][2 * st + 1], ra[i][1][2 * st + 1], dd);
        }
      }
      WgmmaCommit();
      WgmmaWait<1>();
      if (b0 == 0 && release) MbarArriveAt(rel_bar());
    }
  }
}

// The lane's words of a chunk: its two row groups' weights from wa (the first group's, the second
// 512 bytes on) and their scale words from sa (likewise 32 bytes on); kOneMul: the scale words
// with the fast path's 0x7E per byte added.
template <bool kOneMul>
__device__ __forceinline__ void LoadChunkWords(uint4 (&q)[2], uint32_t (&sw)[2], uint32_t wa, uint32_t sa,
                                               bool full) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (full) {
      asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];"
                   : "=r"(q[r].x), "=r"(q[r].y), "=r"(q[r].z), "=r"(q[r].w) : "r"(wa + r * 512));
    } else {
      asm volatile("ld.shared.v2.u32 {%0,%1}, [%2];" : "=r"(q[r].x), "=r"(q[r].y) : "r"(wa + r * 512));
      q[r].z = q[r].w = 0;
    }
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(sw[r]) : "r"(sa + r * 32));
    if (kOneMul) sw[r] += 0x7E7E7E7Eu;
  }
}

// One chunk of a consumer warpgroup's main loop (heights above 16 rows), from the stage at sbase:
// a full 128-K chunk or the 64-K tail (as `full` says). release: the warpgroup's leader arrives on
// the empty barrier of the stage before `stage` (of S at empty0) once this chunk's first wgmma
// group has been issued and the group before it (that stage's last) has completed.
template <int BN, int NC, int S, bool kOneMul, int BW>
__device__ __forceinline__ void ConsumeChunk(float (&acc)[BN / 2], uint32_t sbase, int lg, int lane, int g,
                                             bool full, bool release, uint32_t empty0, int stage) {
  constexpr uint32_t kTWBytes = TWBytes<NC>(), kTTokOff = TTokOff<NC>();
  uint4 q[2];
  uint32_t sw[2];
  // LoadChunkWords's loads, written out again with the addresses in their old form: through it,
  // ptxas emitted other code for the 72 kernels of heights above 16 rows (scripts/cubin-diff.py),
  // whose timings were tuned with this one.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const uint32_t wa = sbase + (lg + r) * 512;
    if (full) {
      asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];"
                   : "=r"(q[r].x), "=r"(q[r].y), "=r"(q[r].z), "=r"(q[r].w) : "r"(wa + lane * 16));
    } else {
      asm volatile("ld.shared.v2.u32 {%0,%1}, [%2];" : "=r"(q[r].x), "=r"(q[r].y) : "r"(wa + lane * 8));
      q[r].z = q[r].w = 0;
    }
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(sw[r]) : "r"(sbase + kTWBytes + (lg + r) * 32 + g * 4));
    if (kOneMul) sw[r] += 0x7E7E7E7Eu;
  }
  ChunkMma<BN, kOneMul, BW, 1>(acc, q, sw, SmemDescLo(sbase + kTTokOff), full, release,
                               [&] { return empty0 + 8 * (stage == 0 ? S - 1 : stage - 1); });
}

// ConsumeChunks (below) at tile heights up to 16 rows, where the wgmma is small (m64n16k16, eight a
// chunk) and the loop's bookkeeping weighs: the full chunks in one loop and the tail chunk after
// it, so that neither carries the other's branches and addresses; the ring's position kept as the
// addresses it names (the stage's base, its full barrier, the empty barrier to release, the token
// slabs' descriptor), each advanced by a constant per chunk and reset at the ring's end; the
// thread's offsets into a stage and the ring's bases in registers; each wgmma's descriptor one
// 64-bit add to the chunk's. A full chunk of the gate_up kernel at 16 rows: 166 instructions a
// warp, 41.5 per k32 block, against 200 when every address was computed from the stage and thread
// indices per chunk (bench/gpu/sass_loops.py); under ncu at 256 tokens of gpt-oss-120b 46.5 per
// k32 block in the whole kernel against 55.0. The H100's time did not move (memory-bound there).
template <int BN, int NC, int S, bool kOneMul, int BW>
__device__ __forceinline__ void ConsumeChunksNarrow(float (&acc)[BN / 2], const GemmArgs& p, uint32_t base0,
                                                    uint32_t full0, uint32_t empty0, int lg, int lane, int g,
                                                    bool leader, int& stage, uint32_t& phase) {
  constexpr uint32_t kStage = TStageBytes<BN, NC>(), kDStage = kStage >> 4;
  constexpr int kG = NC > 5 ? 1 : 2;
  // Opaque, so that ptxas keeps them rather than computing them again from the thread index and
  // the CTA's shared window per chunk.
  uint32_t wo = lg * 512 + lane * 16, so = TWBytes<NC>() + lg * 32 + g * 4;
  uint32_t full_end = full0 + 8 * S, to_empty = empty0 - full0;
  uint32_t dlo_base = SmemDescLo(base0 + TTokOff<NC>());
  asm volatile("" : "+r"(wo), "+r"(so), "+r"(base0), "+r"(full0), "+r"(full_end), "+r"(to_empty), "+r"(dlo_base));
  uint32_t sb = base0 + stage * kStage, fb = full0 + 8 * stage, dlo = dlo_base + stage * kDStage;
  uint32_t rel = 0;  // the previous chunk's empty barrier: set by advance() before any release
  auto advance = [&] {
    rel = fb + to_empty;
    sb += kStage;
    fb += 8;
    dlo += kDStage;
    if (fb == full_end) {
      sb = base0;
      fb = full0;
      dlo = dlo_base;
      phase ^= 1;
    }
  };
  uint4 q[2];
  uint32_t sw[2];
  const int nfull = min(p.nfull, p.chunks);
  for (int c = 0; c < nfull; ++c) {
    MbarWaitAt(fb, phase);
    LoadChunkWords<kOneMul>(q, sw, sb + wo, sb + so, true);
    ChunkMma<BN, kOneMul, BW, kG, true>(acc, q, sw, dlo, true, c > 0 && leader, [&] { return rel; });
    advance();
  }
  if (p.chunks > nfull) {  // the tail chunk: 8 bytes a lane
    MbarWaitAt(fb, phase);
    LoadChunkWords<kOneMul>(q, sw, sb + lg * 512 + lane * 8, sb + so, false);
    ChunkMma<BN, kOneMul, BW, kG, true>(acc, q, sw, dlo, false, nfull > 0 && leader, [&] { return rel; });
    advance();
  }
  stage = int(fb - full0) >> 3;
}

// One consumer warpgroup's main loop over a tile's chunks from the ring at (stage, phase),
// advanced past them (base0 / full0 / empty0: shared addresses of the stages and the barriers; lg:
// the warp's first row group in a stage). Each chunk's stage is released (by the warpgroup's
// leader) at the next chunk's first wgmma group, once the group before has completed; the last
// chunk's stage stays held: the caller releases it after its WgmmaWait<0>, or never (one tile per
// CTA). At tile heights up to 16 rows ConsumeChunksNarrow (above) runs them; at larger heights a
// second copy of the loop (full chunks, then the tail) costs ptxas the registers to overlap the
// wgmma (C7512), so one loop takes both kinds.
// BW (<= BN): the wgmma's token columns, a prefix of the stage's BN-row slabs and of acc (an m64nW
// accumulator fragment is the first W / 2 registers of the m64nBN one): a tile of fewer rows than
// BN need not pay the tensor work of all BN.
template <int BN, int NC, int S, bool kOneMul, int BW = BN>
__device__ __forceinline__ void ConsumeChunks(float (&acc)[BN / 2], const GemmArgs& p, uint32_t base0,
                                              uint32_t full0, uint32_t empty0, int lg, int lane, int g,
                                              bool leader, int& stage, uint32_t& phase) {
  if constexpr (BN <= 16) {
    ConsumeChunksNarrow<BN, NC, S, kOneMul, BW>(acc, p, base0, full0, empty0, lg, lane, g, leader, stage, phase);
    return;
  }
  constexpr uint32_t kStage = TStageBytes<BN, NC>();
  for (int c = 0; c < p.chunks; ++c) {
    MbarWaitAt(full0 + 8 * stage, phase);
    ConsumeChunk<BN, NC, S, kOneMul, BW>(acc, base0 + stage * kStage, lg, lane, g, c < p.nfull, c > 0 && leader,
                                         empty0, stage);
    if (++stage == S) {
      stage = 0;
      phase ^= 1;
    }
  }
}

// The persistent kernel's main loop for one item of `rows` token rows: at the narrowest wgmma
// width of VarWidths<BN> that covers them (an expert's last tile is often partial: at 16384
// tokens of gpt-oss-120b its 512 +- 22 slots fill two 192-row tiles and a third of ~100-160
// rows). Each width is its own copy of the loop. At 96 and 192 rows a third copy makes ptxas
// serialize the wgmma (C7512, "insufficient register resources"; e.g. {64, 128, 192} or
// {128, 160, 192}), so those lists have two widths: check the build log when changing them.
// 192 rows: {160, 192}, not {128, 192}: kAuto's mix puts an expert's remainder of <= 128 rows
// in 128-row tiles of its own, so the 192-row tiles that are partial hold 129-160 rows (4096
// tokens of gpt-oss-120b: 1.5017 -> 1.4176 ms, the same elsewhere; `ab` step).
template <int BN> struct VarWidths { static constexpr int w[] = {BN}; };  // the other heights: one
template <> struct VarWidths<64> { static constexpr int w[] = {32, 64}; };
template <> struct VarWidths<96> { static constexpr int w[] = {64, 96}; };
template <> struct VarWidths<128> { static constexpr int w[] = {64, 128}; };
template <> struct VarWidths<192> { static constexpr int w[] = {160, 192}; };
template <> struct VarWidths<256> { static constexpr int w[] = {64, 128, 192, 256}; };

template <int BN, int NC, int S, bool kOneMul, int I = 0>
__device__ __forceinline__ void ConsumeItem(float (&acc)[BN / 2], int rows, const GemmArgs& p, uint32_t base0,
                                            uint32_t full0, uint32_t empty0, int lg, int lane, int g, bool leader,
                                            int& stage, uint32_t& phase) {
  constexpr int W = VarWidths<BN>::w[I];
  if constexpr (I + 1 < int(std::size(VarWidths<BN>::w))) {
    if (rows > W) {
      ConsumeItem<BN, NC, S, kOneMul, I + 1>(acc, rows, p, base0, full0, empty0, lg, lane, g, leader, stage, phase);
      return;
    }
  }
  ConsumeChunks<BN, NC, S, kOneMul, W>(acc, p, base0, full0, empty0, lg, lane, g, leader, stage, phase);
}

template <int BN, int NC, bool kGateUp, bool kOneMul>
__global__ void __launch_bounds__(128 * (NC + 1), 1) WgmmaTmaKernel(const __grid_constant__ CUtensorMap tmap,
                                                                     const __grid_constant__ CUtensorMap wmap,
                                                                     const __grid_constant__ CUtensorMap smap,
                                                                     const GemmArgs p) {
  constexpr int S = TStages<BN, NC>();
  static_assert(S >= 2, "two stages must fit");
  constexpr int kTGroups = 8 * NC;
  constexpr int kCols = 64 * NC;
  extern __shared__ uint8_t smem_raw[];
  __shared__ __align__(8) uint64_t full_bar[S], empty_bar[S], epi_bar;
  __shared__ __align__(16) float s_bias[kCols];
  __shared__ int32_t s_pair[kGateUp ? 1 : BN];
  __shared__ float s_w[kGateUp ? 1 : BN];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));

  const int tile = blockIdx.y;
  if (tile >= __ldg(p.ntiles)) return;
  const int e = __ldg(p.tiles + 3 * tile), row0 = __ldg(p.tiles + 3 * tile + 1),
            rows = __ldg(p.tiles + 3 * tile + 2);
  const int nt_total = p.n >> 3;
  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < S; ++s) {
      MbarInit(&full_bar[s], 1);
      MbarInit(&empty_bar[s], NC);
    }
    MbarInit(&epi_bar, 96);
    FenceMbarInit();
  }
  __syncthreads();

  const int wg = threadIdx.x >> 7;
  if (wg == NC) {  // producer warpgroup
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(ProducerRegs<NC, 1>()));
    if (threadIdx.x == 128 * NC) {
      PrefetchTensorMap(&tmap);
      PrefetchTensorMap(&wmap);
      PrefetchTensorMap(&smap);
      int stage = 0;
      uint32_t phase = 0;
      // The CTA's first group row in the maps: e * nt_total + blockIdx.x * kTGroups.
      ProduceChunks<BN, NC, S>(smem, full_bar, empty_bar, &tmap, &wmap, &smap, p,
                               e * nt_total + blockIdx.x * kTGroups, row0, stage, phase);
    } else if (threadIdx.x >= 128 * NC + 32) {
      FetchEpilogueOperands<BN, kCols, kGateUp>(p, e, row0, rows, blockIdx.x * kCols, threadIdx.x - (128 * NC + 32),
                                                 s_bias, s_pair, s_w, &epi_bar);
    }
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(ConsumerRegs<NC, 1>()));

  const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  // This warp's two row groups within a stage's weights and scales.
  const int lg = wg * 8 + warp * 2;
  float acc[BN / 2];
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) acc[i] = 0.f;

  uint32_t base0 = SmemAddr(smem), full0 = SmemAddr(&full_bar[0]), empty0 = SmemAddr(&empty_bar[0]);
  asm volatile("" : "+r"(base0), "+r"(full0), "+r"(empty0));
  int stage = 0;
  uint32_t phase = 0;
  ConsumeChunks<BN, NC, S, kOneMul>(acc, p, base0, full0, empty0, lg, lane, g, (threadIdx.x & 127) == 0, stage,
                                    phase);
  WgmmaWait<0>();

  // Epilogue through shared memory, over the stages (every chunk consumed, every wgmma of every
  // warpgroup complete once the named barrier passes; the producer issued its last copy before
  // the consumers could finish).
  float* tileb = reinterpret_cast<float*>(smem);
  asm volatile("bar.sync 1, %0;" ::"n"(128 * NC) : "memory");
  WriteAccTile<BN, kCols>(tileb, acc, wg * 64 + warp * 16 + g, t);
  asm volatile("bar.sync 1, %0;" ::"n"(128 * NC) : "memory");
  MbarWait(&epi_bar, 0);
  StoreTile<BN, kCols, 128 * NC, true, kGateUp>(tileb, p, e, row0, rows, blockIdx.x * kCols, threadIdx.x, s_bias,
                                                 s_pair, s_w);
}

// ---- the persistent variant (MXSERVE_PLAN wgmma_cfg=persist) -------------------------------
// One CTA per SM walks the (tile, column block) items tile-major (item = tile * column blocks +
// block; CTA i takes items i, i + grid, ...), with one ring of stages across its items: the
// producer runs ahead into the next item while the consumers finish one, and the epilogue goes
// from the accumulators straight to global memory (StoreAccRegs), so that the next item's copies
// overlap it. The epilogue operands are double-buffered (epi_full / epi_empty).
//
// Why: at 16384 tokens of gpt-oss-120b (192-row tiles) the one-tile kernel's tensor pipe sits idle
// through the epilogue, and the fp32 tile that epilogue goes through does not
// fit beside the stages. The producer thread loops over items here, so it keeps 40 registers
// (setmaxnreg), not the one-tile kernel's 24 at four or more consumer warpgroups; the consumers
// lose nothing by it (ptxas compiles them within LaunchRegs either way).
inline constexpr int kPersistProducerRegs = 40;

// Variant::var_width off: the persistent kernel's wgmma at the tile height for every item
// (GemmArgs::var_width).
bool VarWidthSetting() { return CurrentVariant().var_width; }

template <int BN, int NC, bool kGateUp, bool kOneMul>
__global__ void __launch_bounds__(128 * (NC + 1), 1)
    WgmmaTmaPersistKernel(const __grid_constant__ CUtensorMap tmap, const __grid_constant__ CUtensorMap wmap,
                          const __grid_constant__ CUtensorMap smap, const GemmArgs p) {
  constexpr int S = TStages<BN, NC>();
  constexpr int kTGroups = 8 * NC;
  constexpr int kCols = 64 * NC;
  extern __shared__ uint8_t smem_raw[];
  __shared__ __align__(8) uint64_t full_bar[S], empty_bar[S], epi_full[2], epi_empty[2];
  __shared__ __align__(16) float s_bias[2][kCols];
  __shared__ int32_t s_pair[2][kGateUp ? 1 : BN];
  __shared__ float s_w[2][kGateUp ? 1 : BN];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));

  const int ncb = (p.n + kCols - 1) / kCols;
  const int items = __ldg(p.ntiles) * ncb;
  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < S; ++s) {
      MbarInit(&full_bar[s], 1);
      MbarInit(&empty_bar[s], NC);
    }
    for (int b = 0; b < 2; ++b) {
      MbarInit(&epi_full[b], 96);
      MbarInit(&epi_empty[b], 128 * NC);
    }
    FenceMbarInit();
  }
  __syncthreads();

  const int wg = threadIdx.x >> 7;
  if (wg == NC) {  // producer warpgroup: warp 0's first thread copies, warps 1-3 fetch epilogue operands
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kPersistProducerRegs));
    if (threadIdx.x == 128 * NC) {
      PrefetchTensorMap(&tmap);
      PrefetchTensorMap(&wmap);
      PrefetchTensorMap(&smap);
      const int nt_total = p.n >> 3;
      int stage = 0;
      uint32_t phase = 0;
      for (int it = blockIdx.x; it < items; it += gridDim.x) {
        const int tile = it / ncb, cb = it - tile * ncb;
        ProduceChunks<BN, NC, S>(smem, full_bar, empty_bar, &tmap, &wmap, &smap, p,
                                 __ldg(p.tiles + 3 * tile) * nt_total + cb * kTGroups, __ldg(p.tiles + 3 * tile + 1),
                                 stage, phase);
      }
    } else if (threadIdx.x >= 128 * NC + 32) {
      int j = 0;
      for (int it = blockIdx.x; it < items; it += gridDim.x, ++j) {
        const int tile = it / ncb, cb = it - tile * ncb, b = j & 1;
        MbarWaitSleeping(&epi_empty[b], ((j >> 1) & 1) ^ 1);
        FetchEpilogueOperands<BN, kCols, kGateUp>(p, __ldg(p.tiles + 3 * tile), __ldg(p.tiles + 3 * tile + 1),
                                                   __ldg(p.tiles + 3 * tile + 2), cb * kCols,
                                                   threadIdx.x - (128 * NC + 32), s_bias[b], s_pair[b], s_w[b],
                                                   &epi_full[b]);
      }
    }
    return;
  }
  // (At six warpgroups the consumers keep the launch's 72: nothing to ask for.)
  constexpr int kConsumerRegs = ConsumerRegs<NC, 1, kPersistProducerRegs>();
  if constexpr (kConsumerRegs > LaunchRegs<NC, 1>()) {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kConsumerRegs));
  }

  const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int lg = wg * 8 + warp * 2;
  uint32_t base0 = SmemAddr(smem), full0 = SmemAddr(&full_bar[0]), empty0 = SmemAddr(&empty_bar[0]);
  // Opaque to ptxas at the larger heights (their schedule was tuned so); at 8 and 16 rows ptxas
  // does better with them in view (256 tokens of gpt-oss-120b: ~0.8 %, docs/PERFORMANCE.md).
  if constexpr (BN > 16) asm volatile("" : "+r"(base0), "+r"(full0), "+r"(empty0));
  const bool leader = (threadIdx.x & 127) == 0;
  int stage = 0, j = 0;
  uint32_t phase = 0;
  for (int it = blockIdx.x; it < items; it += gridDim.x, ++j) {
    const int tile = it / ncb, cb = it - tile * ncb, b = j & 1;
    float acc[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[i] = 0.f;
    const int rows = __ldg(p.tiles + 3 * tile + 2);
    ConsumeItem<BN, NC, S, kOneMul>(acc, p.var_width ? rows : BN, p, base0, full0, empty0, lg, lane, g, leader, stage, phase);
    WgmmaWait<0>();
    if (leader) MbarArriveAt(empty0 + 8 * (stage == 0 ? S - 1 : stage - 1));  // the item's last chunk
    MbarWait(&epi_full[b], (j >> 1) & 1);
    StoreAccRegs<BN, kCols, kGateUp>(acc, p, __ldg(p.tiles + 3 * tile + 1), rows,
                                     cb * kCols, wg * 64 + warp * 16 + g, t, s_bias[b], s_pair[b], s_w[b]);
    MbarArrive(&epi_empty[b]);
  }
}

template <int BN, int NC, bool kPersist, bool kGateUp, bool kOneMul>
void LaunchTT(const CUtensorMap& tmap, const CUtensorMap& wmap, const CUtensorMap& smap, const GemmArgs& a,
              int max_tiles, cudaStream_t stream) {
  constexpr size_t kSmem = TSmemBytes<BN, NC, kPersist>();
  static_assert(kSmem <= (225u << 10), "one CTA per SM must fit in shared memory");
  const int64_t ncb = (a.n + 64 * NC - 1) / (64 * NC);  // column blocks
  if constexpr (kPersist) {
    constexpr auto kern = WgmmaTmaPersistKernel<BN, NC, kGateUp, kOneMul>;
    RaiseSmemOnce<kern>(int(kSmem));
    GemmArgs v = a;
    v.var_width = VarWidthSetting();
    kern<<<PersistentGrid(int64_t(max_tiles) * ncb), 128 * (NC + 1), kSmem, stream>>>(tmap, wmap, smap, v);
  } else {
    constexpr auto kern = WgmmaTmaKernel<BN, NC, kGateUp, kOneMul>;
    RaiseSmemOnce<kern>(int(kSmem));
    kern<<<dim3(unsigned(ncb), max_tiles), 128 * (NC + 1), kSmem, stream>>>(tmap, wmap, smap, a);
  }
}

template <int BN, int NC, bool kPersist>
int LaunchTBn(const CUtensorMap& tmap, const GemmArgs& a, bool gate_up, bool one_mul, int max_tiles,
              cudaStream_t stream) {
  CUtensorMap wmap, smap;
  if (CUresult r = EncodeWeightMaps(a, 1, 8 * NC, &wmap, &smap); r != CUDA_SUCCESS) return int(r);
  if (gate_up) {
    one_mul ? LaunchTT<BN, NC, kPersist, true, true>(tmap, wmap, smap, a, max_tiles, stream)
            : LaunchTT<BN, NC, kPersist, true, false>(tmap, wmap, smap, a, max_tiles, stream);
  } else {
    one_mul ? LaunchTT<BN, NC, kPersist, false, true>(tmap, wmap, smap, a, max_tiles, stream)
            : LaunchTT<BN, NC, kPersist, false, false>(tmap, wmap, smap, a, max_tiles, stream);
  }
  return 0;
}

// Tile height BN with NC consumer warpgroups (the `ldg` configuration's), the persistent kernel
// with PNC: at 128 rows four (96 registers) have ptxas serialize its wgmma (C7512), so three.
template <int BN, int NC, int PNC = NC>
int LaunchTH(const CUtensorMap& tmap, const GemmArgs& a, bool gate_up, bool one_mul, int max_tiles, bool persist,
             cudaStream_t stream) {
  return persist ? LaunchTBn<BN, PNC, true>(tmap, a, gate_up, one_mul, max_tiles, stream)
                 : LaunchTBn<BN, NC, false>(tmap, a, gate_up, one_mul, max_tiles, stream);
}

}  // namespace
}  // namespace mxserve::kernels::cuda::internal
