// The register-A wgmma GEMM of moe_cuda_wgmma.cu at every tile height (32 ... 256 token rows, the
// `ldg` configuration's consumer warpgroups), with the weights and scales streamed by TMA into
// shared-memory stages instead of each warp's ld.global one chunk ahead. The default since
// 2026-12-01: checked in the 04:34 call (every wgmma path pinned, 1165 PASS, memcheck clean) and
// 5-10 % faster than `ldg` at 1024-16384 tokens of gpt-oss-120b in the same call
// (docs/PERFORMANCE.md, "Thirteenth session"). MXSERVE_CUDA_MOE_WGMMA_CFG=ldg (or a named
// configuration) runs moe_cuda_wgmma.cu's kernel instead.
//
// Why: after the leaner main loop (twelfth session) the warps of the register-A kernel wait most
// for the weights (long-scoreboard stalls 3.8 per issued instruction at 1024 tokens of
// gpt-oss-120b), and one more chunk of lookahead in registers (PF = 2) was slower. Here the lookahead
// is the stage count (three to five chunks) and costs no registers; the kst decode kernel streams its
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

// NC consumer warpgroups of 64 weight rows each, as moe_cuda_wgmma.cu's default configuration for
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
template <int BN, int NC>
constexpr size_t TSmemBytes() {
  const size_t stages = size_t(TStages<BN, NC>()) * TStageBytes<BN, NC>();
  const size_t epilogue = size_t(BN) * (64 * NC + 4) * 4;
  return (stages > epilogue ? stages : epilogue) + 1024;
}

template <int BN, int NC, bool kGateUp, bool kOneMul>
__global__ void __launch_bounds__(128 * (NC + 1), 1) WgmmaTmaKernel(const __grid_constant__ CUtensorMap tmap,
                                                                     const __grid_constant__ CUtensorMap wmap,
                                                                     const __grid_constant__ CUtensorMap smap,
                                                                     const GemmArgs p) {
  constexpr int S = TStages<BN, NC>();
  static_assert(S >= 2, "two stages must fit");
  constexpr uint32_t kStage = TStageBytes<BN, NC>(), kSlab = BN * 128;
  constexpr uint32_t kTWBytes = TWBytes<NC>(), kTSBytes = TSBytes<NC>(), kTTokOff = TTokOff<NC>();
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
    const uint32_t dlo0 = SmemDescLo(sbase + kTTokOff);
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
                      SmemDescOf(dlo + 2 * st));
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
  WriteAccTile<BN, kCols>(tileb, acc, wg * 64 + warp * 16 + g, t);
  asm volatile("bar.sync 1, %0;" ::"n"(128 * NC) : "memory");
  MbarWait(&epi_bar, 0);
  StoreTile<BN, kCols, 128 * NC, true, kGateUp>(tileb, p, e, row0, rows, blockIdx.x * kCols, threadIdx.x, s_bias,
                                                 s_pair, s_w);
}

template <int BN, int NC, bool kGateUp, bool kOneMul>
void LaunchTT(const CUtensorMap& tmap, const CUtensorMap& wmap, const CUtensorMap& smap, const GemmArgs& a,
              int max_tiles, cudaStream_t stream) {
  static_assert(TSmemBytes<BN, NC>() <= (225u << 10), "one CTA per SM must fit in shared memory");
  auto kern = WgmmaTmaKernel<BN, NC, kGateUp, kOneMul>;
  static const bool raised = [&] {
    cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, int(TSmemBytes<BN, NC>()));
    return true;
  }();
  (void)raised;
  dim3 grid((a.n + 64 * NC - 1) / (64 * NC), max_tiles);
  kern<<<grid, 128 * (NC + 1), TSmemBytes<BN, NC>(), stream>>>(tmap, wmap, smap, a);
}

template <int BN, int NC>
int LaunchTBn(const CUtensorMap& tmap, const GemmArgs& a, bool gate_up, bool one_mul, int max_tiles,
              cudaStream_t stream) {
  CUtensorMap wmap, smap;
  const int64_t groups = int64_t(a.held) * (a.n / 8);
  if (CUresult r = EncodeRows(&wmap, a.q, groups, int64_t(4) * a.kp, 512, 8 * NC); r != CUDA_SUCCESS) return int(r);
  if (CUresult r = EncodeRows(&smap, a.sc, groups, int64_t(a.chunks) * 32, 32, 8 * NC); r != CUDA_SUCCESS) {
    return int(r);
  }
  if (gate_up) {
    one_mul ? LaunchTT<BN, NC, true, true>(tmap, wmap, smap, a, max_tiles, stream)
            : LaunchTT<BN, NC, true, false>(tmap, wmap, smap, a, max_tiles, stream);
  } else {
    one_mul ? LaunchTT<BN, NC, false, true>(tmap, wmap, smap, a, max_tiles, stream)
            : LaunchTT<BN, NC, false, false>(tmap, wmap, smap, a, max_tiles, stream);
  }
  return 0;
}

}  // namespace

int LaunchWgmmaTmaGemm(const GemmArgs& a, bool gate_up, bool one_mul, int bn, int max_tiles, cudaStream_t stream) {
  if (a.rows <= 0) return 0;
  CUtensorMap tmap;
  if (const int r = EncodeActivationSlabs(a, bn, &tmap); r != 0) return r;
  switch (bn) {
    case 32: return LaunchTBn<32, 6>(tmap, a, gate_up, one_mul, max_tiles, stream);
    case 40: return LaunchTBn<40, 6>(tmap, a, gate_up, one_mul, max_tiles, stream);
    case 48: return LaunchTBn<48, 6>(tmap, a, gate_up, one_mul, max_tiles, stream);
    case 64: return LaunchTBn<64, 5>(tmap, a, gate_up, one_mul, max_tiles, stream);
    case 96: return LaunchTBn<96, 4>(tmap, a, gate_up, one_mul, max_tiles, stream);
    case 128: return LaunchTBn<128, 4>(tmap, a, gate_up, one_mul, max_tiles, stream);
    case 192: return LaunchTBn<192, 3>(tmap, a, gate_up, one_mul, max_tiles, stream);
    case 256: return LaunchTBn<256, 2>(tmap, a, gate_up, one_mul, max_tiles, stream);
    default: return -1;
  }
}

}  // namespace mxserve::kernels::cuda::internal
