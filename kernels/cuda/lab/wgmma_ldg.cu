// The register-A wgmma GEMM with each warp loading its weights one chunk ahead (`ldg`), in the
// configurations Variant::wgmma_cfg names (lab only: production runs the TMA-fed form of the same
// GEMM, ../moe_cuda_wgmma_tma.cu). MXFP4 weights x bf16 activations, fp32 accumulation, one
// launch per matrix (gate_up with bias + SwiGLU, down with bias x routing weight);
// ../WGMMA.md has the design.
//
// Orientation: the weights are wgmma's A operand, from registers: each warp streams its 16
// weight rows (two 8-row groups of the upload layout, 16 contiguous bytes per lane per 128-K
// chunk) straight from global memory and decodes them with the Decode4/scale trick into exactly
// the m64k16 A fragments (the upload layout was made for mma.sync B fragments, which are the
// same registers). No shared memory, no proxy fence for weights. The token rows of one expert
// tile are the B operand (N = BN tokens, K-major): TMA copies 64-K slabs of the activation
// buffer into a ring of shared-memory stages (128-byte swizzle) completing on mbarriers; a
// producer warp refills a stage once both consumer warpgroups have released it.
//
// K order: wgmma reads a slab's K positions in plain order, so the activations must be in plain
// order too: the routing gather writes them so for these paths (RoutingArgs::plain_k), and the
// gate_up epilogue writes the down operand in plain order.
//
// CTA: warpgroups 0..NC-1 consume (each MW x 64 weight rows x BN tokens, accumulators in
// registers), warpgroup NC produces (one thread issues the TMA; setmaxnreg hands its registers to
// the consumers). The epilogue stages the fp32 tile through shared memory so that the act / y
// stores are 16 bytes wide and contiguous. Every output element is one fp32 sum in a fixed K
// order: results are deterministic.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>

#include "kernels/cuda/lab/lab_kernels.h"
#include "kernels/cuda/moe_cuda_gemm.cuh"
#include "kernels/cuda/moe_cuda_launch.h"
#include "kernels/cuda/moe_cuda_tma.h"
#include "kernels/cuda/moe_cuda_wgmma_common.cuh"
#include "kernels/cuda/moe_cuda_wgmma_rs.cuh"

namespace mxserve::kernels::cuda::internal {
namespace {

// (wgmma fence / commit / wait, SmemDesc and the epilogue are in moe_cuda_wgmma_common.cuh;
// WgmmaRs in moe_cuda_wgmma_rs.cuh)

// ---- the GEMM ---------------------------------------------------------------------------------
// NC consumer warpgroups and one producer warpgroup, their registers split by setmaxnreg
// (LaunchRegs / ProducerRegs / ConsumerRegs in moe_cuda_wgmma_common.cuh).

// Shared-memory stages of 64 K x BN tokens.
template <int BN>
constexpr int Stages() { return BN >= 256 ? 5 : BN >= 128 ? 8 : 10; }
template <int BN, int MW, int NC>
constexpr size_t SmemBytes() {
  const size_t stages = size_t(Stages<BN>()) * BN * 128;
  const size_t epilogue = size_t(BN) * (64 * MW * NC + 4) * 4;
  return (stages > epilogue ? stages : epilogue) + 1024;
}

// BN: token rows (wgmma N); MW: m64 weight blocks per consumer warpgroup; NC: consumer
// warpgroups; CB: CTAs per SM (__launch_bounds__); D: wgmma groups (k32 blocks) left in flight; PF: chunks of weights requested ahead.
// kEpi: the epilogue operands (bias, and for down the slot ids and routing weights) are fetched
// into shared memory at the start by the producer warpgroup's three idle warps.
template <int BN, int MW, int NC, int CB, int D, int PF, bool kEpi, bool kGateUp, bool kOneMul>
__global__ void __launch_bounds__(128 * (NC + 1), CB) WgmmaGemmKernel(const __grid_constant__ CUtensorMap tmap,
                                                               const GemmArgs p) {
  constexpr int S = Stages<BN>();
  constexpr uint32_t kStageBytes = BN * 128;
  constexpr int kCols = 64 * MW * NC;  // weight rows of the CTA
  extern __shared__ uint8_t smem_raw[];
  __shared__ __align__(8) uint64_t full_bar[S], empty_bar[S], epi_bar;
  __shared__ __align__(16) float s_bias[kEpi ? kCols : 4];
  __shared__ int32_t s_pair[kEpi && !kGateUp ? BN : 1];
  __shared__ float s_w[kEpi && !kGateUp ? BN : 1];
  uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));

  // The tile read, the weight addressing and the chunk load are spelled out in this kernel rather
  // than shared with the SS kernel (its ReadWgmmaTile, ExpertGroupsOf, LoadGroupChunk): with those
  // helpers here, the PTX was the same but for a few prologue instructions,
  // yet ptxas emitted different code for 66 of the 96 instantiations and 4096 tokens (192-row
  // tiles) ran 4.5 % slower (against the older build, alternating).
  const int tile = blockIdx.y;
  if (tile >= __ldg(p.ntiles)) return;
  const int e = __ldg(p.tiles + 3 * tile), row0 = __ldg(p.tiles + 3 * tile + 1),
            rows = __ldg(p.tiles + 3 * tile + 2);
  const int nslabs = p.kp / 64;
  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < S; ++s) {
      MbarInit(&full_bar[s], 1);
      MbarInit(&empty_bar[s], NC);
    }
    if constexpr (kEpi) MbarInit(&epi_bar, 96);
    FenceMbarInit();
  }
  __syncthreads();

  const int wg = threadIdx.x >> 7;
  if (wg == NC) {  // producer
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(ProducerRegs<NC, CB>()));
    if (threadIdx.x == 128 * NC) {
      ProduceTokenSlabs<S, kStageBytes>(&tmap, smem, full_bar, empty_bar, nslabs, row0);
    } else if (kEpi && threadIdx.x >= 128 * NC + 32) {
      FetchEpilogueOperands<BN, kCols, kGateUp>(p, e, row0, rows, blockIdx.x * kCols, threadIdx.x - (128 * NC + 32),
                                                 s_bias, s_pair, s_w, &epi_bar);
    }
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(ConsumerRegs<NC, CB>()));

  const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  // The weight addressing and the chunk load are spelled out here, like the tile read above (see there).
  static_assert(D == 1, "the slab release below assumes one wgmma group left in flight");
  const int nt_total = p.n >> 3;
  const int64_t rg_bytes = int64_t(4) * p.kp;  // 8 rows * kp/2
  // This lane's next chunk of (m64 block j, half r): full chunks 16 bytes at qp (the 64-K tail
  // chunk 8 bytes at qp - 8 lane), the scale word at sp; both advance by a chunk per load. Row
  // groups past n read row group 0 instead: their products only reach accumulator rows the
  // epilogue never stores, and the loads need no branch. (Loop-carried pointers, not offsets from
  // one base: ptxas recomputed such offsets from the thread index at every chunk.)
  const uint8_t* qp[MW][2];
  const uint8_t* sp[MW][2];
#pragma unroll
  for (int j = 0; j < MW; ++j)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      int rg = ((blockIdx.x * NC + wg) * MW * 64 + j * 64 + warp * 16 + 8 * r) >> 3;
      rg = rg < nt_total ? rg : 0;
      const int64_t grp = int64_t(e) * nt_total + rg;
      qp[j][r] = p.q + grp * rg_bytes + lane * 16;
      sp[j][r] = p.sc + grp * p.chunks * 32 + g * 4;
    }

  float acc[MW][BN / 2];
#pragma unroll
  for (int j = 0; j < MW; ++j)
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) acc[j][i] = 0.f;

  // Loads chunk c (the next one in order) into q / sc.
  auto load_chunk = [&](int c, uint4 (&q)[MW][2], uint32_t (&sc)[MW][2]) {
    const bool tail = c >= p.nfull;
#pragma unroll
    for (int j = 0; j < MW; ++j)
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        if (!tail) {
          q[j][r] = LdStream16(qp[j][r]);
        } else {
          const uint2 v = LdStream8(qp[j][r] - lane * 8);
          q[j][r] = make_uint4(v.x, v.y, 0, 0);
        }
        sc[j][r] = __ldg(reinterpret_cast<const uint32_t*>(sp[j][r]));
        qp[j][r] += 512;
        sp[j][r] += 32;
      }
  };

  // The token-slab ring: slab i is in stage i % S, its phase (i / S) & 1; tracked as the loop
  // goes rather than recomputed per block. The descriptor's low word and the barrier addresses
  // are offsets from values computed once (the empty asm keeps ptxas from recomputing them from
  // the shared-memory window at every block, as it did).
  uint32_t dlo0 = SmemDescLo(SmemAddr(smem));
  uint32_t full0 = SmemAddr(&full_bar[0]), empty0 = SmemAddr(&empty_bar[0]);
  asm volatile("" : "+r"(dlo0), "+r"(full0), "+r"(empty0));
  const bool leader = (threadIdx.x & 127) == 0;
  int stage = 0;
  uint32_t phase = 0;
  // Weights of chunk c live in register slot c % (PF + 1); chunk c + PF is requested when chunk
  // c starts (the loop is unrolled by PF + 1 so every slot index is a constant).
  uint4 qr[PF + 1][MW][2];
  uint32_t sr[PF + 1][MW][2];
#pragma unroll
  for (int d = 0; d < PF; ++d)
    if (d < p.chunks) load_chunk(d, qr[d], sr[d]);
  for (int c0 = 0; c0 < p.chunks; c0 += PF + 1) {
#pragma unroll
    for (int d = 0; d <= PF; ++d) {
      const int c = c0 + d;
      if (c < p.chunks) {
        if (c + PF < p.chunks) load_chunk(c + PF, qr[(d + PF) % (PF + 1)], sr[(d + PF) % (PF + 1)]);
        const int nb = c < p.nfull ? 4 : 2;  // k32 blocks in this chunk
#pragma unroll
        for (int b = 0; b < 4; ++b) {
          if (b < nb) {
            if ((b & 1) == 0) MbarWaitAt(full0 + 8 * stage, phase);
            if (kOneMul && b == 0) {
              // The scale word's 0x7E per byte (DecodeScaledPre), added at the chunk's first use
              // rather than at its load, which would wait for the load there.
#pragma unroll
              for (int j = 0; j < MW; ++j)
#pragma unroll
                for (int r = 0; r < 2; ++r) sr[d][j][r] += 0x7E7E7E7Eu;
            }
            uint32_t ra[MW][2][4];
#pragma unroll
            for (int j = 0; j < MW; ++j)
#pragma unroll
              for (int r = 0; r < 2; ++r) {
                const uint4& qq = qr[d][j][r];
                const uint32_t w = b == 0 ? qq.x : b == 1 ? qq.y : b == 2 ? qq.z : qq.w;
                DecodeScaledPre<kOneMul>(w, sr[d][j][r], b, ra[j][r]);
              }
            WgmmaFence();
            // Stage bytes and the k16 step's 32-byte column, in the descriptor's 16-byte units.
            const uint32_t dlo = dlo0 + stage * (kStageBytes >> 4) + (b & 1) * 4;
#pragma unroll
            for (int st = 0; st < 2; ++st) {
#pragma unroll
              for (int j = 0; j < MW; ++j)
                WgmmaRs<BN>(acc[j], ra[j][0][2 * st], ra[j][1][2 * st], ra[j][0][2 * st + 1],
                            ra[j][1][2 * st + 1], SmemDescOf(dlo + 2 * st));
            }
            WgmmaCommit();
            WgmmaWait<1>();
            if ((b & 1) == 0) {
              // The previous block, the last of the slab before this one, is complete: release it.
              if (leader && (c > 0 || b > 0)) MbarArriveAt(empty0 + 8 * (stage == 0 ? S - 1 : stage - 1));
            } else if (++stage == S) {
              stage = 0;
              phase ^= 1;
            }
          }
        }
      }
    }
  }
  WgmmaWait<0>();

  // Epilogue through shared memory (the stages are free: every slab was consumed and every
  // wgmma has completed in both warpgroups once the named barrier passes). The raw fp32 tile
  // [BN tokens][kCols weight rows] is written with a float4-level XOR swizzle and a 4-word row pad
  // (no bank conflicts either way), then read back row-wise so that global stores are 16-byte
  // and contiguous along each token's output row.
  float* tileb = reinterpret_cast<float*>(smem);
  asm volatile("bar.sync 1, %0;" ::"n"(128 * NC) : "memory");
#pragma unroll
  for (int j = 0; j < MW; ++j) WriteAccTile<BN, kCols>(tileb, acc[j], (wg * MW + j) * 64 + warp * 16 + g, t);
  asm volatile("bar.sync 1, %0;" ::"n"(128 * NC) : "memory");
  if constexpr (kEpi) MbarWait(&epi_bar, 0);
  StoreTile<BN, kCols, 128 * NC, kEpi, kGateUp>(tileb, p, e, row0, rows, blockIdx.x * kCols, threadIdx.x, s_bias,
                                                 s_pair, s_w);
}

}  // namespace

// ---- host side --------------------------------------------------------------------------------
namespace {

template <int BN, int MW, int NC, int CB, int D, int PF, bool kEpi, bool kGateUp, bool kOneMul>
void LaunchT(const CUtensorMap& map, const GemmArgs& a, int max_tiles, cudaStream_t stream) {
  static_assert(CB * SmemBytes<BN, MW, NC>() <= (227u << 10), "CB CTAs per SM must fit in shared memory");
  constexpr auto kern = WgmmaGemmKernel<BN, MW, NC, CB, D, PF, kEpi, kGateUp, kOneMul>;
  RaiseSmemOnce<kern>(int(SmemBytes<BN, MW, NC>()));
  const int rows_per_cta = 64 * MW * NC;
  dim3 grid((a.n + rows_per_cta - 1) / rows_per_cta, max_tiles);
  kern<<<grid, 128 * (NC + 1), SmemBytes<BN, MW, NC>(), stream>>>(map, a);
}

template <int BN, int MW, int NC, int CB, int D, int PF, bool kEpi>
void LaunchCfg(const CUtensorMap& map, const GemmArgs& a, bool gate_up, bool one_mul, int max_tiles,
               cudaStream_t stream) {
  if (gate_up) {
    one_mul ? LaunchT<BN, MW, NC, CB, D, PF, kEpi, true, true>(map, a, max_tiles, stream)
            : LaunchT<BN, MW, NC, CB, D, PF, kEpi, true, false>(map, a, max_tiles, stream);
  } else {
    one_mul ? LaunchT<BN, MW, NC, CB, D, PF, kEpi, false, true>(map, a, max_tiles, stream)
            : LaunchT<BN, MW, NC, CB, D, PF, kEpi, false, false>(map, a, max_tiles, stream);
  }
}

// The configurations (Variant::wgmma_cfg 3 ... 10), by consumer warpgroups x weight rows each,
// CTAs per SM:
//   ldg  per tile height: n6 at 32, 40 and 48 token rows, n5 at 64, nc4 at 96 and 128 (weights
//        loaded at the start of their chunk at 128, PF = 0), nc3 at 192 (PF = 0), epi at 256;
//   epi  2 x 128, one CTA, epilogue operands fetched at the start; nc2 the same with them loaded
//        in the epilogue;
//   nc3, nc4, n5, n6   3, 4, 5, 6 x 64, one CTA;
//   x2   2 x 64, two CTAs (epilogue operands fetched by the producer's idle warps, as all but nc2).
// Each is built only where it compiles without spills in the registers ptxas compiles it for
// (LaunchRegs: n6 72, n5 80, nc4 96, nc3 128; n6 spills at 64, n5 at 96).
enum WgmmaConfig { kDefault, kTma, kPersist, kLdg, kEpi, kNc2, kNc3, kNc4, kN5, kN6, kX2 };

// Tiles of 32, 40 or 48 token rows: n6, or x2 / n5 pinned.
template <int BN>
void LaunchSmall(WgmmaConfig cfg, const CUtensorMap& map, const GemmArgs& a, bool gate_up, bool one_mul,
                 int max_tiles, cudaStream_t stream) {
  cfg == kX2   ? LaunchCfg<BN, 1, 2, 2, 1, 1, true>(map, a, gate_up, one_mul, max_tiles, stream)
  : cfg == kN5 ? LaunchCfg<BN, 1, 5, 1, 1, 1, true>(map, a, gate_up, one_mul, max_tiles, stream)
               : LaunchCfg<BN, 1, 6, 1, 1, 1, true>(map, a, gate_up, one_mul, max_tiles, stream);
}

}  // namespace

int LaunchWgmmaLdgGemm(const GemmArgs& a, bool gate_up, bool one_mul, int bn, int max_tiles, int config,
                       cudaStream_t stream) {
  if (a.rows <= 0) return 0;
  if (bn < 32 || config < kLdg || config > kX2) return -1;
  CUtensorMap map;
  if (const int r = EncodeActivationSlabs(a, bn, &map); r != 0) return r;
  // Configurations run on the GPU (check + bench, see WGMMA.md): wgmma depth 1, weights one chunk
  // ahead. (Depth 2 made ptxas serialize the wgmma pipeline, C7513.)
  const WgmmaConfig cfg = WgmmaConfig(config);
  if (bn == 48) {
    LaunchSmall<48>(cfg, map, a, gate_up, one_mul, max_tiles, stream);
  } else if (bn == 40) {
    LaunchSmall<40>(cfg, map, a, gate_up, one_mul, max_tiles, stream);
  } else if (bn == 32) {
    LaunchSmall<32>(cfg, map, a, gate_up, one_mul, max_tiles, stream);
  } else if (bn == 64) {
    cfg == kNc2   ? LaunchCfg<64, 2, 2, 1, 1, 1, false>(map, a, gate_up, one_mul, max_tiles, stream)
    : cfg == kEpi ? LaunchCfg<64, 2, 2, 1, 1, 1, true>(map, a, gate_up, one_mul, max_tiles, stream)
    : cfg == kNc3 ? LaunchCfg<64, 1, 3, 1, 1, 1, true>(map, a, gate_up, one_mul, max_tiles, stream)
    : cfg == kNc4 ? LaunchCfg<64, 1, 4, 1, 1, 1, true>(map, a, gate_up, one_mul, max_tiles, stream)
    : cfg == kX2  ? LaunchCfg<64, 1, 2, 2, 1, 1, true>(map, a, gate_up, one_mul, max_tiles, stream)
                  : LaunchCfg<64, 1, 5, 1, 1, 1, true>(map, a, gate_up, one_mul, max_tiles, stream);
  } else if (bn == 96) {
    cfg == kNc3 ? LaunchCfg<96, 1, 3, 1, 1, 1, true>(map, a, gate_up, one_mul, max_tiles, stream)
                : LaunchCfg<96, 1, 4, 1, 1, 1, true>(map, a, gate_up, one_mul, max_tiles, stream);
  } else if (bn == 192) {
    LaunchCfg<192, 1, 3, 1, 1, 0, true>(map, a, gate_up, one_mul, max_tiles, stream);
  } else if (bn == 256) {
    cfg == kNc2 ? LaunchCfg<256, 1, 2, 1, 1, 1, false>(map, a, gate_up, one_mul, max_tiles, stream)
                : LaunchCfg<256, 1, 2, 1, 1, 1, true>(map, a, gate_up, one_mul, max_tiles, stream);
  } else {
    cfg == kNc2   ? LaunchCfg<128, 2, 2, 1, 1, 1, false>(map, a, gate_up, one_mul, max_tiles, stream)
    : cfg == kEpi ? LaunchCfg<128, 2, 2, 1, 1, 1, true>(map, a, gate_up, one_mul, max_tiles, stream)
    : cfg == kNc3 ? LaunchCfg<128, 1, 3, 1, 1, 1, true>(map, a, gate_up, one_mul, max_tiles, stream)
                  : LaunchCfg<128, 1, 4, 1, 1, 0, true>(map, a, gate_up, one_mul, max_tiles, stream);
  }
  return 0;
}

}  // namespace mxserve::kernels::cuda::internal
