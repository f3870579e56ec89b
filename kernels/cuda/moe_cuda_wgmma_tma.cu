// WORK IN PROGRESS (branch wip-wgmma-tma; not yet run on a GPU): the register-A wgmma GEMM of
// moe_cuda_wgmma.cu for the narrow token tiles (32, 40, 48 rows; six consumer warpgroups), with
// the weights and scales streamed by TMA into shared-memory stages instead of each warp's
// ld.global one chunk ahead. MXSERVE_CUDA_MOE_WGMMA_CFG=tma selects it.
//
// Why: after the leaner main loop (twelfth session) the warps of the register-A kernel wait most
// for the weights (long-scoreboard stalls 3.8 per issued instruction at 1024 tokens of
// gpt-oss-120b), and one more chunk of lookahead in registers (PF = 2) was slower. Here the lookahead
// is the stage count (five chunks) and costs no registers; the kst decode kernel streams its
// weights the same way (its tensor maps, EncodeRows).
//
// Stage (one 128-K chunk): the CTA's 8 NC row groups' weights (512 bytes each, the upload layout),
// their scale words (32 bytes each), then the tile's two 64-K token slabs (128-byte swizzle, as
// moe_cuda_wgmma.cu's stages). One producer thread fills a stage once every consumer warpgroup
// has released it; consumers release a chunk's stage when its last block's wgmma has completed.
// The tail chunk (64 K) has one slab; its weight box runs past the row's end and arrives
// zero-filled. Row groups past this expert's rows read the next expert's (or zeros past the last
// expert): their products reach accumulator rows the epilogue never stores.
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/moe_cuda_gemm.cuh"
#include "kernels/cuda/moe_cuda_launch.h"
#include "kernels/cuda/moe_cuda_tma.h"
#include "kernels/cuda/moe_cuda_wgmma_common.cuh"
#include "kernels/cuda/moe_cuda_wgmma_rs.cuh"

namespace mxserve::kernels::cuda::internal {
namespace {

constexpr int kTNc = 6;                            // consumer warpgroups
constexpr int kTLaunchRegs = 65536 / (128 * (kTNc + 1)) / 8 * 8;  // 72
constexpr int kTProducerRegs = 24;
constexpr int kTConsumerRegs = (kTLaunchRegs + (kTLaunchRegs - kTProducerRegs) / kTNc) / 8 * 8;  // 80
static_assert(kTConsumerRegs == 80);
constexpr int kTStages = 5;
constexpr int kTGroups = 8 * kTNc;                 // 8-row groups of the CTA: 48
constexpr uint32_t kTWBytes = kTGroups * 512;      // a chunk's weights
constexpr uint32_t kTSBytes = kTGroups * 32;       // its scale words
constexpr uint32_t kTTokOff = (kTWBytes + kTSBytes + 1023) / 1024 * 1024;
template <int BN>
constexpr uint32_t TStageBytes() { return kTTokOff + 2 * BN * 128; }
template <int BN>
constexpr size_t TSmemBytes() {
  const size_t stages = size_t(kTStages) * TStageBytes<BN>();
  const size_t epilogue = size_t(BN) * (64 * kTNc + 4) * 4;
  return (stages > epilogue ? stages : epilogue) + 1024;
}

template <int BN, bool kGateUp, bool kOneMul>
__global__ void __launch_bounds__(128 * (kTNc + 1), 1) WgmmaTmaKernel(const __grid_constant__ CUtensorMap tmap,
                                                                     const __grid_constant__ CUtensorMap wmap,
                                                                     const __grid_constant__ CUtensorMap smap,
                                                                     const GemmArgs p) {
  constexpr int S = kTStages, NC = kTNc;
  constexpr uint32_t kStage = TStageBytes<BN>(), kSlab = BN * 128;
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
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kTProducerRegs));
    if (threadIdx.x == 128 * NC) {
      PrefetchTensorMap(&tmap);
      PrefetchTensorMap(&wmap);
      PrefetchTensorMap(&smap);
      const int grow = e * nt_total + blockIdx.x * kTGroups;  // the CTA's first group row in the maps
      int stage = 0;
      uint32_t phase = 0;
      for (int c = 0; c < p.chunks; ++c) {
        MbarWait(&empty_bar[stage], phase ^ 1);
        const bool full = c < p.nfull;
        uint8_t* base = smem + stage * kStage;
        MbarExpectTx(&full_bar[stage], kTWBytes + kTSBytes + (full ? 2 : 1) * kSlab);
        TmaLoad2d(base, &wmap, &full_bar[stage], c * 64, grow);
        TmaLoad2d(base + kTWBytes, &smap, &full_bar[stage], c * 4, grow);
        TmaLoad2d(base + kTTokOff, &tmap, &full_bar[stage], 2 * c * 64, row0);
        if (full) TmaLoad2d(base + kTTokOff + kSlab, &tmap, &full_bar[stage], (2 * c + 1) * 64, row0);
        if (++stage == S) {
          stage = 0;
          phase ^= 1;
        }
      }
    } else if (threadIdx.x >= 128 * NC + 32) {
      const int h = threadIdx.x - (128 * NC + 32);
      const int n0 = blockIdx.x * kCols;
      for (int i = h; i < kCols; i += 96) s_bias[i] = n0 + i < p.n ? __ldg(p.bias + int64_t(e) * p.n + n0 + i) : 0.f;
      if constexpr (!kGateUp) {
        for (int i = h; i < BN; i += 96) {
          const int pair = i < rows ? __ldg(p.sorted + row0 + i) : 0;
          s_pair[i] = pair;
          s_w[i] = i < rows ? __ldg(p.route_w + pair) : 0.f;
        }
      }
      MbarArrive(&epi_bar);
    }
    return;
  }
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kTConsumerRegs));

  const int warp = (threadIdx.x >> 5) & 3, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  // This warp's two row groups within a stage's weights and scales.
  const int lg = wg * 8 + warp * 2;
  float acc[BN / 2];
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) acc[i] = 0.f;

  uint32_t base0 = SmemAddr(smem), full0 = SmemAddr(&full_bar[0]), empty0 = SmemAddr(&empty_bar[0]);
  asm volatile("" : "+r"(base0), "+r"(full0), "+r"(empty0));
  constexpr uint32_t kDescHi = (1024 >> 4) | (1u << 30);  // SmemDesc's high word
  const bool leader = (threadIdx.x & 127) == 0;
  int stage = 0;
  uint32_t phase = 0;
  for (int c = 0; c < p.chunks; ++c) {
    MbarWaitAt(full0 + 8 * stage, phase);
    const uint32_t sbase = base0 + stage * kStage;
    const bool full = c < p.nfull;
    uint4 q[2];
    uint32_t sw[2];
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
    const uint32_t dlo0 = uint32_t(SmemDesc(sbase + kTTokOff));
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      if (b < 2 || full) {
        uint32_t ra[2][4];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          const uint32_t w = b == 0 ? q[r].x : b == 1 ? q[r].y : b == 2 ? q[r].z : q[r].w;
          DecodeScaledPre<kOneMul>(w, sw[r], b, ra[r]);
        }
        WgmmaFence();
        // Slab b >> 1 of the stage, the k32 block's half (b & 1), the k16 step st: 16-byte units.
        const uint32_t dlo = dlo0 + (b >> 1) * (kSlab >> 4) + (b & 1) * 4;
#pragma unroll
        for (int st = 0; st < 2; ++st) {
          WgmmaRs<BN>(acc, ra[0][2 * st], ra[1][2 * st], ra[0][2 * st + 1], ra[1][2 * st + 1],
                      (uint64_t(kDescHi) << 32) | (dlo + 2 * st));
        }
        WgmmaCommit();
        WgmmaWait<1>();
        // The block before this one is complete; at a chunk's first block that was the previous
        // chunk's last: release its stage.
        if (b == 0 && c > 0 && leader) MbarArriveAt(empty0 + 8 * (stage == 0 ? S - 1 : stage - 1));
      }
    }
    if (++stage == S) {
      stage = 0;
      phase ^= 1;
    }
  }
  WgmmaWait<0>();

  // Epilogue through shared memory, over the stages (every chunk consumed, every wgmma of every
  // warpgroup complete once the named barrier passes; the producer issued its last copy before
  // the consumers could finish).
  float* tileb = reinterpret_cast<float*>(smem);
  asm volatile("bar.sync 1, %0;" ::"n"(128 * NC) : "memory");
  const int nb = wg * 64 + warp * 16 + g;
#pragma unroll
  for (int i = 0; i < BN / 8; ++i)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh)
#pragma unroll
      for (int x = 0; x < 2; ++x) tileb[TileIdx<kCols>(8 * i + 2 * t + x, nb + 8 * hh)] = acc[4 * i + 2 * hh + x];
  asm volatile("bar.sync 1, %0;" ::"n"(128 * NC) : "memory");
  MbarWait(&epi_bar, 0);
  StoreTile<BN, kCols, 128 * NC, true, kGateUp>(tileb, p, e, row0, rows, blockIdx.x * kCols, threadIdx.x, s_bias,
                                                 s_pair, s_w);
}

template <int BN, bool kGateUp, bool kOneMul>
void LaunchTT(const CUtensorMap& tmap, const CUtensorMap& wmap, const CUtensorMap& smap, const GemmArgs& a,
              int max_tiles, cudaStream_t stream) {
  static_assert(TSmemBytes<BN>() <= (227u << 10), "one CTA per SM must fit in shared memory");
  auto kern = WgmmaTmaKernel<BN, kGateUp, kOneMul>;
  static const bool raised = [&] {
    cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, int(TSmemBytes<BN>()));
    return true;
  }();
  (void)raised;
  dim3 grid((a.n + 64 * kTNc - 1) / (64 * kTNc), max_tiles);
  kern<<<grid, 128 * (kTNc + 1), TSmemBytes<BN>(), stream>>>(tmap, wmap, smap, a);
}

template <int BN>
void LaunchTBn(const CUtensorMap& tmap, const CUtensorMap& wmap, const CUtensorMap& smap, const GemmArgs& a,
               bool gate_up, bool one_mul, int max_tiles, cudaStream_t stream) {
  if (gate_up) {
    one_mul ? LaunchTT<BN, true, true>(tmap, wmap, smap, a, max_tiles, stream)
            : LaunchTT<BN, true, false>(tmap, wmap, smap, a, max_tiles, stream);
  } else {
    one_mul ? LaunchTT<BN, false, true>(tmap, wmap, smap, a, max_tiles, stream)
            : LaunchTT<BN, false, false>(tmap, wmap, smap, a, max_tiles, stream);
  }
}

}  // namespace

int LaunchWgmmaTmaGemm(const GemmArgs& a, bool gate_up, bool one_mul, int bn, int max_tiles, cudaStream_t stream) {
  if (a.rows <= 0) return 0;
  if (bn != 32 && bn != 40 && bn != 48) return -1;
  CUtensorMap tmap, wmap, smap;
  if (const int r = EncodeActivationSlabs(a, bn, &tmap); r != 0) return r;
  const int64_t groups = int64_t(a.held) * (a.n / 8);
  if (CUresult r = EncodeRows(&wmap, a.q, groups, int64_t(4) * a.kp, 512, kTGroups); r != CUDA_SUCCESS) return int(r);
  if (CUresult r = EncodeRows(&smap, a.sc, groups, int64_t(a.chunks) * 32, 32, kTGroups); r != CUDA_SUCCESS) {
    return int(r);
  }
  switch (bn) {
    case 32: LaunchTBn<32>(tmap, wmap, smap, a, gate_up, one_mul, max_tiles, stream); break;
    case 40: LaunchTBn<40>(tmap, wmap, smap, a, gate_up, one_mul, max_tiles, stream); break;
    default: LaunchTBn<48>(tmap, wmap, smap, a, gate_up, one_mul, max_tiles, stream); break;
  }
  return 0;
}

}  // namespace mxserve::kernels::cuda::internal
