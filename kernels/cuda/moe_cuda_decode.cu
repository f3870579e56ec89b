// The decode-regime grouped GEMM: few rows (token-slots) per expert, so the time is the weight
// stream and the decode arithmetic. See DecodeGemmKernel.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "kernels/cuda/moe_cuda_gemm.cuh"
#include "kernels/cuda/moe_cuda_launch.h"

namespace mxserve::kernels::cuda::internal {

// One warp per 8 weight rows (an n8 tile) of one expert tile, over all of K: no split-K, no
// barriers, warps fully independent. Each warp keeps D chunks of weights in flight in a
// register ring (chunk c + D is requested as soon as chunk c's registers are consumed), reads
// the tile's activation rows through L1 one chunk at a time, and alternates two accumulator
// chains so consecutive mma.sync do not wait on each other.
// kSmemA (8-row tiles): the tile's valid activation rows are copied into shared memory once per
// CTA (four warps share them), so the multiply never waits on L2 for activations.
template <bool kHi, int D, bool kGateUp, bool kOneMul, bool kSmemA>
__global__ void __launch_bounds__(128) DecodeGemmKernel(const GemmArgs p) {
  extern __shared__ uint4 smem_a[];
  const int tile = blockIdx.y;
  const int valid_tiles = __ldg(p.ntiles);
  const int e = __ldg(p.tiles + 3 * tile), row0 = __ldg(p.tiles + 3 * tile + 1),
            rows = __ldg(p.tiles + 3 * tile + 2);
  if (tile >= valid_tiles) return;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int nt_total = p.n >> 3;
  const int nt = blockIdx.x * 4 + warp;
  const bool nt_ok = nt < nt_total;
  const int a_stride = p.kp / 8 + 1;  // uint4 per row, padded against bank conflicts
  if constexpr (kSmemA) {
    const int per_row = p.kp / 8;
    const int n_rows = min(rows, 8);
    for (int i = threadIdx.x; i < n_rows * per_row; i += 128) {
      const int r = i / per_row, col = i - r * per_row;
      smem_a[r * a_stride + col] = __ldg(reinterpret_cast<const uint4*>(p.a + int64_t(row0 + r) * p.kp) + col);
    }
    __syncthreads();
  }
  if (!nt_ok) return;
  const int64_t rg_bytes = int64_t(4) * p.kp;
  const uint8_t* qrow = p.q + (int64_t(e) * nt_total + nt) * rg_bytes;
  const uint8_t* srow = p.sc + (int64_t(e) * nt_total + nt) * p.chunks * 32 + g * 4;
  const bool v_lo = g < rows, v_hi = kHi && g + 8 < rows;
  const uint16_t* a_lo_row = p.a + int64_t(row0 + (v_lo ? g : 0)) * p.kp + t * 32;
  const uint16_t* a_hi_row = p.a + int64_t(row0 + (v_hi ? g + 8 : 0)) * p.kp + t * 32;
  const int nfull = p.nfull;

  // Epilogue operands, requested now.
  const int n = nt * 8 + 2 * t;
  const float* be = p.bias + int64_t(e) * p.n;
  const float b0 = __ldg(be + n), b1 = __ldg(be + n + 1);
  int pair_lo = 0, pair_hi = 0;
  float w_lo = 0.f, w_hi = 0.f;
  if constexpr (!kGateUp) {
    if (v_lo) pair_lo = __ldg(p.sorted + row0 + g);
    if (v_hi) pair_hi = __ldg(p.sorted + row0 + g + 8);
    if (v_lo) w_lo = __ldg(p.route_w + pair_lo);
    if (v_hi) w_hi = __ldg(p.route_w + pair_hi);
  }

  float acc[2][4];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.f;

  auto block = [&](float (&c4)[4], uint32_t w, uint32_t sword, int b, const uint4& al, const uint4& ah) {
    uint32_t r[4];
    Decode4(w, r);
    if constexpr (kOneMul) {
      const uint32_t m = FoldedScale(sword + 0x7E7E7E7Eu, b);
#pragma unroll
      for (int j = 0; j < 4; ++j) r[j] = Bf16x2Mul(r[j], m);
    } else {
      const uint32_t m = ScaleBf16x2((sword >> (8 * b)) & 0xFFu);
#pragma unroll
      for (int j = 0; j < 4; ++j) r[j] = Bf16x2Mul(Bf16x2Mul(r[j], 0x7E807E80u), m);
    }
    Mma(c4, al.x, ah.x, al.y, ah.y, r[0], r[1]);
    Mma(c4, al.z, ah.z, al.w, ah.w, r[2], r[3]);
  };

  // Weights: a register ring D chunks ahead (chunk c + D is requested as soon as chunk c's
  // registers are consumed).
  auto load_a = [&](bool v, const uint16_t* row, int g_row, int off) -> uint4 {
    if (!v) return make_uint4(0, 0, 0, 0);
    if constexpr (kSmemA) return smem_a[g_row * a_stride + ((off + t * 32) >> 3)];
    return __ldg(reinterpret_cast<const uint4*>(row + off));
  };
  uint4 bq[D];
  uint32_t bs[D];
#pragma unroll
  for (int d = 0; d < D; ++d) {
    if (d < nfull) {
      bq[d] = LdStream16(qrow + d * 512 + lane * 16);
      bs[d] = __ldg(reinterpret_cast<const uint32_t*>(srow + d * 32));
    }
  }
  for (int c0 = 0; c0 < nfull; c0 += D) {
#pragma unroll
    for (int d = 0; d < D; ++d) {
      const int c = c0 + d;
      if (c < nfull) {
        uint4 al[4], ah[4];
#pragma unroll
        for (int b = 0; b < 4; ++b) {
          al[b] = load_a(v_lo, a_lo_row, g, c * 128 + 8 * b);
          ah[b] = load_a(v_hi, a_hi_row, g + 8, c * 128 + 8 * b);
        }
        const uint4 q = bq[d];
        const uint32_t sw = bs[d];
        if (c + D < nfull) {
          bq[d] = LdStream16(qrow + int64_t(c + D) * 512 + lane * 16);
          bs[d] = __ldg(reinterpret_cast<const uint32_t*>(srow + (c + D) * 32));
        }
        block(acc[0], q.x, sw, 0, al[0], ah[0]);
        block(acc[1], q.y, sw, 1, al[1], ah[1]);
        block(acc[0], q.z, sw, 2, al[2], ah[2]);
        block(acc[1], q.w, sw, 3, al[3], ah[3]);
      }
    }
  }
  if (p.chunks > nfull) {  // the 64-wide tail chunk: 8 bytes per lane, two blocks
    const int c = nfull;
    const uint2 q = LdStream8(qrow + int64_t(c) * 512 + lane * 8);
    const uint32_t sw = __ldg(reinterpret_cast<const uint32_t*>(srow + c * 32));
    const int off = c * 128 - t * 32 + t * 16;
    uint4 al[2], ah[2];
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      al[b] = load_a(v_lo, a_lo_row, g, off + 8 * b);
      ah[b] = load_a(v_hi, a_hi_row, g + 8, off + 8 * b);
    }
    block(acc[0], q.x, sw, 0, al[0], ah[0]);
    block(acc[1], q.y, sw, 1, al[1], ah[1]);
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) acc[0][j] += acc[1][j];

#pragma unroll
  for (int h = 0; h < (kHi ? 2 : 1); ++h) {
    if (!(h == 0 ? v_lo : v_hi)) continue;
    const float v0 = acc[0][2 * h] + b0, v1 = acc[0][2 * h + 1] + b1;
    if constexpr (kGateUp) {
      float gt = v0, up = v1;
      if (gt > p.limit) gt = p.limit;
      if (up > p.limit) up = p.limit;
      if (up < -p.limit) up = -p.limit;
      const float act = (up + 1.0f) * gt * (1.0f / (1.0f + expf(-p.alpha * gt)));
      p.act[int64_t(row0 + g + 8 * h) * p.kp_out + PermIndex(n >> 1, p.nfull_out)] = F2Bf16(act);
    } else {
      const int pair = h == 0 ? pair_lo : pair_hi;
      const float w = h == 0 ? w_lo : w_hi;
      *reinterpret_cast<float2*>(p.y + int64_t(pair) * p.n + n) = make_float2(w * v0, w * v1);
    }
  }
}

template <bool kHi, bool kOneMul, bool kSmemA>
void LaunchDecodeT(const GemmArgs& a, bool gate_up, int max_tiles, cudaStream_t stream) {
  constexpr int D = kHi ? 6 : 8;
  const size_t smem = kSmemA ? size_t(8) * (a.kp / 8 + 1) * 16 : 0;
  static const bool raised = [] {
    cudaFuncSetAttribute(DecodeGemmKernel<kHi, D, true, kOneMul, kSmemA>,
                         cudaFuncAttributeMaxDynamicSharedMemorySize, 100 << 10);
    cudaFuncSetAttribute(DecodeGemmKernel<kHi, D, false, kOneMul, kSmemA>,
                         cudaFuncAttributeMaxDynamicSharedMemorySize, 100 << 10);
    return true;
  }();
  (void)raised;
  dim3 grid((a.n / 8 + 3) / 4, max_tiles);
  if (gate_up) {
    DecodeGemmKernel<kHi, D, true, kOneMul, kSmemA><<<grid, 128, smem, stream>>>(a);
  } else {
    DecodeGemmKernel<kHi, D, false, kOneMul, kSmemA><<<grid, 128, smem, stream>>>(a);
  }
}

bool DecodeSupports(int chunks) { return true; }

void LaunchDecodeGemm(const GemmArgs& a, bool gate_up, bool rows16, bool one_mul, int max_tiles,
                      int est_tiles, cudaStream_t stream) {
  if (max_tiles <= 0) return;
  // Activations through shared memory for 8-row tiles (MXSERVE_CUDA_MOE_SMEM_A=1): measured
  // 10-15 % slower than plain L1/L2 reads at 1-64 tokens (docs/PERFORMANCE.md), so off.
  static const bool smem_a_env = [] {
    const char* v = std::getenv("MXSERVE_CUDA_MOE_SMEM_A");
    return v != nullptr && std::string(v) == "1";
  }();
  const bool smem_a = smem_a_env && size_t(8) * (a.kp / 8 + 1) * 16 <= (64 << 10);
  if (rows16) {
    if (one_mul) LaunchDecodeT<true, true, false>(a, gate_up, max_tiles, stream);
    else LaunchDecodeT<true, false, false>(a, gate_up, max_tiles, stream);
  } else if (smem_a) {
    if (one_mul) LaunchDecodeT<false, true, true>(a, gate_up, max_tiles, stream);
    else LaunchDecodeT<false, false, true>(a, gate_up, max_tiles, stream);
  } else {
    if (one_mul) LaunchDecodeT<false, true, false>(a, gate_up, max_tiles, stream);
    else LaunchDecodeT<false, false, false>(a, gate_up, max_tiles, stream);
  }
}

}  // namespace mxserve::kernels::cuda::internal
