// The decode-regime grouped GEMM: few rows (token-slots) per expert, so the time is the weight
// stream and the decode arithmetic. See DecodeGemmKernel.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/moe_cuda_gemm.cuh"
#include "kernels/cuda/moe_cuda_launch.h"
#include "kernels/cuda/moe_cuda_variant.h"

namespace mxserve::kernels::cuda::internal {

// One warp per 8 weight rows (an n8 tile) of one expert tile, over all of K: no split-K, warps
// independent. Each warp keeps D chunks of weights in flight in a register ring (chunk c + D is
// requested as soon as chunk c's registers are consumed) and alternates two accumulator chains so
// consecutive mma.sync do not wait on each other.
// Activations: under a full weight stream every load that reaches L2 waits about as long as a
// DRAM read (ncu: ~0.8 us per chunk when each chunk's activations came from L2, one chunk ahead),
// so with kSmemA (8-row tiles, the default) the tile's valid rows are copied into shared memory
// once per CTA with cp.async, issued after the weight ring, and the multiply reads them there.
// Without it (16-row tiles, or rows too long for shared memory) they come through L1, requested
// one chunk ahead.
template <bool kHi, int D, bool kGateUp, bool kOneMul, bool kSmemA, int kWarps, int kMinBlocks>
__global__ void __launch_bounds__(32 * kWarps, kMinBlocks) DecodeGemmKernel(const GemmArgs p) {
  extern __shared__ uint4 smem_a[];
  // gate_up reads the tile list and activations the routing wrote: wait for it first. down reads
  // only the tile list (routing, long done) before its weights, so it starts its weight stream
  // while gate_up finishes and waits just before the first activation load.
  if constexpr (kGateUp) PdlWait();
  const int tile = blockIdx.y;
  const int valid_tiles = __ldg(p.ntiles);
  const int e = __ldg(p.tiles + 3 * tile), row0 = __ldg(p.tiles + 3 * tile + 1),
            rows = __ldg(p.tiles + 3 * tile + 2);
  PdlLaunchDependents();
  // A CTA without a tile still waits in down: a grid with none at all (a second tile height's
  // list can be empty) must not complete before the GEMM before it, which its successors assume.
  if (tile >= valid_tiles) {
    if constexpr (!kGateUp) PdlWait();
    return;
  }
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int nt_total = p.n >> 3;
  const int nt = blockIdx.x * kWarps + warp;
  const bool nt_ok = nt < nt_total;
  const int a_stride = p.kp / 8 + 1;  // uint4 per row, padded against bank conflicts
  const int64_t rg_bytes = int64_t(4) * p.kp;
  const uint8_t* qrow = p.q + (int64_t(e) * nt_total + (nt_ok ? nt : 0)) * rg_bytes;
  const uint8_t* srow = p.sc + (int64_t(e) * nt_total + (nt_ok ? nt : 0)) * p.chunks * 32 + g * 4;
  const int nfull = p.nfull;

  // Weights first: the ring's D chunks.
  uint4 bq[D];
  uint32_t bs[D];
#pragma unroll
  for (int d = 0; d < D; ++d) {
    if (nt_ok && d < nfull) {
      bq[d] = LdStream16(qrow + d * 512 + lane * 16);
      bs[d] = __ldg(reinterpret_cast<const uint32_t*>(srow + d * 32));
    }
  }
  if constexpr (!kGateUp) PdlWait();
  if constexpr (kSmemA) {
    const int per_row = p.kp / 8;
    const int n_rows = min(rows, kHi ? 16 : 8);
    for (int i = threadIdx.x; i < n_rows * per_row; i += 32 * kWarps) {
      const int r = i / per_row, col = i - r * per_row;
      CpAsync16(smem_a + r * a_stride + col, reinterpret_cast<const uint4*>(p.a + int64_t(row0 + r) * p.kp) + col);
    }
    CpAsyncWaitAll();
    __syncthreads();
  }
  if (!nt_ok) return;
  const bool v_lo = g < rows, v_hi = kHi && g + 8 < rows;
  const uint16_t* a_lo_row = p.a + int64_t(row0 + (v_lo ? g : 0)) * p.kp + t * 32;
  const uint16_t* a_hi_row = p.a + int64_t(row0 + (v_hi ? g + 8 : 0)) * p.kp + t * 32;

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
    DecodeScaled<kOneMul>(w, sword, b, r);
    Mma(c4, al.x, ah.x, al.y, ah.y, r[0], r[1]);
    Mma(c4, al.z, ah.z, al.w, ah.w, r[2], r[3]);
  };

  // off: element offset within the lane's row (chunk * 128 + 8b, or the tail's).
  auto load_a = [&](bool v, const uint16_t* row, int g_row, int off) -> uint4 {
    if (!v) return make_uint4(0, 0, 0, 0);
    if constexpr (kSmemA) return smem_a[g_row * a_stride + ((off + t * 32) >> 3)];
    return __ldg(reinterpret_cast<const uint4*>(row + off));
  };
  uint4 al[4], ah[4];
  if constexpr (!kSmemA) {  // chunk 0's rows; each chunk then requests the next one's
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      al[b] = nfull > 0 ? load_a(v_lo, a_lo_row, g, 8 * b) : make_uint4(0, 0, 0, 0);
      ah[b] = nfull > 0 ? load_a(v_hi, a_hi_row, g + 8, 8 * b) : make_uint4(0, 0, 0, 0);
    }
  }
  for (int c0 = 0; c0 < nfull; c0 += D) {
#pragma unroll
    for (int d = 0; d < D; ++d) {
      const int c = c0 + d;
      if (c < nfull) {
        uint4 nl[4], nh[4];
#pragma unroll
        for (int b = 0; b < 4; ++b) {
          if constexpr (kSmemA) {
            al[b] = load_a(v_lo, a_lo_row, g, c * 128 + 8 * b);
            ah[b] = load_a(v_hi, a_hi_row, g + 8, c * 128 + 8 * b);
          } else {
            const bool next = c + 1 < nfull;
            nl[b] = next ? load_a(v_lo, a_lo_row, g, (c + 1) * 128 + 8 * b) : make_uint4(0, 0, 0, 0);
            nh[b] = next ? load_a(v_hi, a_hi_row, g + 8, (c + 1) * 128 + 8 * b) : make_uint4(0, 0, 0, 0);
          }
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
        if constexpr (!kSmemA) {
#pragma unroll
          for (int b = 0; b < 4; ++b) {
            al[b] = nl[b];
            ah[b] = nh[b];
          }
        }
      }
    }
  }
  if (p.chunks > nfull) {  // the 64-wide tail chunk: 8 bytes per lane, two blocks
    const int c = nfull;
    const uint2 q = LdStream8(qrow + int64_t(c) * 512 + lane * 8);
    const uint32_t sw = __ldg(reinterpret_cast<const uint32_t*>(srow + c * 32));
    const int off = c * 128 - t * 32 + t * 16;
    uint4 tl[2], th[2];
#pragma unroll
    for (int b = 0; b < 2; ++b) {
      tl[b] = load_a(v_lo, a_lo_row, g, off + 8 * b);
      th[b] = load_a(v_hi, a_hi_row, g + 8, off + 8 * b);
    }
    block(acc[0], q.x, sw, 0, tl[0], th[0]);
    block(acc[1], q.y, sw, 1, tl[1], th[1]);
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) acc[0][j] += acc[1][j];

#pragma unroll
  for (int h = 0; h < (kHi ? 2 : 1); ++h) {
    if (!(h == 0 ? v_lo : v_hi)) continue;
    const float v0 = acc[0][2 * h] + b0, v1 = acc[0][2 * h + 1] + b1;
    if constexpr (kGateUp) {
      const float act = GptOssSwiglu(v0, v1, p.alpha, p.limit);
      p.act[int64_t(row0 + g + 8 * h) * p.kp_out + PermIndex(n >> 1, p.nfull_out)] = F2Bf16(act);
    } else {
      const int pair = h == 0 ? pair_lo : pair_hi;
      const float w = h == 0 ? w_lo : w_hi;
      *reinterpret_cast<float2*>(p.y + int64_t(pair) * p.n + n) = make_float2(w * v0, w * v1);
    }
  }
}

// ---- the bulk-copy variant (8-row tiles) --------------------------------------------------------
// Same arithmetic and layout, but nothing is streamed through registers: each warp's whole weight
// run (8 rows x K, contiguous in the layout) and its scales are fetched by the copy engine
// (cp.async.bulk) into shared memory in two halves, each on its own mbarrier, and the tile's
// activation rows once per CTA. A CTA thus has ~50-95 KB of reads in flight from its first
// instruction, without ring registers or load scoreboards, and a warp computes its first half while
// the second lands. ncu showed the register-ring kernel at 20-28 % of DRAM bandwidth at one token
// although it kept 6-8 chunks per warp in flight.
template <bool kGateUp, bool kOneMul>
__global__ void __launch_bounds__(128) DecodeBulkKernel(const GemmArgs p) {
#if MXSERVE_SM90  // bulk copies, transaction mbarriers: not launched before sm_90
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ uint64_t bars[9];  // [warp][half], then the activations'
  if constexpr (kGateUp) PdlWait();
  const int tile = blockIdx.y;
  const int valid_tiles = __ldg(p.ntiles);
  if (tile >= valid_tiles) {  // down: waits all the same (DecodeGemmKernel says why)
    if constexpr (!kGateUp) PdlWait();
    return;
  }
  const int e = __ldg(p.tiles + 3 * tile), row0 = __ldg(p.tiles + 3 * tile + 1),
            rows = __ldg(p.tiles + 3 * tile + 2);
  PdlLaunchDependents();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int nt_total = p.n >> 3;
  const int nt = blockIdx.x * 4 + warp;
  const int nfull = p.nfull, chunks = p.chunks;
  const int rg_bytes = 4 * p.kp;
  const int sc_bytes = chunks * 32;
  const int a_row = 2 * p.kp, a_stride = a_row + 16;  // +16: rows start 4 banks apart
  const int n_rows = min(rows, 8);
  uint8_t* sw = smem + warp * rg_bytes;
  uint8_t* ss = smem + 4 * rg_bytes + warp * sc_bytes;
  uint8_t* sa = smem + 4 * rg_bytes + 4 * sc_bytes;
  const int half = nfull / 2;  // chunks [0, half) then [half, chunks)
  if (threadIdx.x == 0) {
    for (int i = 0; i < 9; ++i) MbarInit(&bars[i], 1);
    FenceMbarInit();
  }
  __syncthreads();
  if (nt < nt_total && lane == 0) {
    const int64_t rg = int64_t(e) * nt_total + nt;
    const uint8_t* q = p.q + rg * rg_bytes;
    MbarExpectTx(&bars[2 * warp], half * 512 + sc_bytes);
    BulkCopyG2S(ss, p.sc + rg * sc_bytes, sc_bytes, &bars[2 * warp]);
    if (half > 0) BulkCopyG2S(sw, q, half * 512, &bars[2 * warp]);
    MbarExpectTx(&bars[2 * warp + 1], rg_bytes - half * 512);
    BulkCopyG2S(sw + half * 512, q + half * 512, rg_bytes - half * 512, &bars[2 * warp + 1]);
  }
  if (threadIdx.x == 0) {
    if constexpr (!kGateUp) PdlWait();  // the activations come from the gate_up GEMM
    MbarExpectTx(&bars[8], n_rows * a_row);
    for (int r = 0; r < n_rows; ++r) BulkCopyG2S(sa + r * a_stride, p.a + int64_t(row0 + r) * p.kp, a_row, &bars[8]);
  }
  if (nt >= nt_total) return;  // (warp 0 always has a row group, so thread 0 stays)
  const bool v_lo = g < rows;

  // Epilogue operands, requested now.
  const int n = nt * 8 + 2 * t;
  const float* be = p.bias + int64_t(e) * p.n;
  const float b0 = __ldg(be + n), b1 = __ldg(be + n + 1);
  int pair_lo = 0;
  float w_lo = 0.f;
  if constexpr (!kGateUp) {
    if (v_lo) pair_lo = __ldg(p.sorted + row0 + g);
    if (v_lo) w_lo = __ldg(p.route_w + pair_lo);
  }
  float acc[2][4];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.f;
  // Lanes of rows past the tile read row 0: mma rows are independent and theirs are never stored.
  const uint8_t* arow = sa + (v_lo ? g : 0) * a_stride + t * 64;
  MbarWait(&bars[8], 0);
  MbarWait(&bars[2 * warp], 0);
#pragma unroll 2
  for (int c = 0; c < half; ++c) SmemChunkMma<kOneMul, false>(acc, sw, ss, arow, c, lane);
  MbarWait(&bars[2 * warp + 1], 0);
#pragma unroll 2
  for (int c = half; c < nfull; ++c) SmemChunkMma<kOneMul, false>(acc, sw, ss, arow, c, lane);
  if (chunks > nfull) SmemChunkMma<kOneMul, true>(acc, sw, ss, arow, nfull, lane);
  if (!v_lo) return;
  const float v0 = acc[0][0] + acc[1][0] + b0, v1 = acc[0][1] + acc[1][1] + b1;
  if constexpr (kGateUp) {
    const float act = GptOssSwiglu(v0, v1, p.alpha, p.limit);
    p.act[int64_t(row0 + g) * p.kp_out + PermIndex(n >> 1, p.nfull_out)] = F2Bf16(act);
  } else {
    *reinterpret_cast<float2*>(p.y + int64_t(pair_lo) * p.n + n) = make_float2(w_lo * v0, w_lo * v1);
  }
#endif  // MXSERVE_SM90
}

size_t DecodeBulkSmem(const GemmArgs& a) {
  const int rows = std::min(8, std::max(1, a.rows));
  return size_t(4) * 4 * a.kp + size_t(4) * a.chunks * 32 + size_t(rows) * (2 * a.kp + 16);
}

template <bool kOneMul>
void LaunchDecodeBulk(const GemmArgs& a, bool gate_up, int max_tiles, cudaStream_t stream) {
  RaiseSmemOnce<DecodeBulkKernel<true, kOneMul>>(200 << 10);
  RaiseSmemOnce<DecodeBulkKernel<false, kOneMul>>(200 << 10);
  auto k = gate_up ? DecodeBulkKernel<true, kOneMul> : DecodeBulkKernel<false, kOneMul>;
  LaunchPdl(k, dim3((a.n / 8 + 3) / 4, max_tiles), dim3(128), DecodeBulkSmem(a), stream, a);
}

// 8-row tiles: 4 warps per CTA; D and resident CTAs chosen so a one-token layer (720 CTAs for
// gpt-oss-120b gate_up) fits in one wave of 6 per SM without spills. 16-row tiles: 8 warps per CTA
// share the (twice as large) activation rows, 2 CTAs per SM at 128 registers.
template <bool kHi, bool kOneMul, bool kSmemA>
void LaunchDecodeT(const GemmArgs& a, bool gate_up, int max_tiles, size_t smem, cudaStream_t stream) {
  constexpr int D = kSmemA && !kHi ? 6 : kHi ? 6 : 8;
  constexpr int kWarps = kHi ? 8 : 4;
  constexpr int kMin = kHi ? 2 : kSmemA ? 6 : 5;
  auto k = gate_up ? DecodeGemmKernel<kHi, D, true, kOneMul, kSmemA, kWarps, kMin>
                   : DecodeGemmKernel<kHi, D, false, kOneMul, kSmemA, kWarps, kMin>;
  RaiseSmemOnce<DecodeGemmKernel<kHi, D, true, kOneMul, kSmemA, kWarps, kMin>>(110 << 10);
  RaiseSmemOnce<DecodeGemmKernel<kHi, D, false, kOneMul, kSmemA, kWarps, kMin>>(110 << 10);
  LaunchPdl(k, dim3((a.n / 8 + kWarps - 1) / kWarps, max_tiles), dim3(32 * kWarps), smem, stream, a);
}

int KstSlice() {
  const int pin = CurrentVariant().decode_pin;
  return pin == 5 ? 2 : pin == 6 ? 4 : pin == 0 ? 0 : -1;
}

void LaunchDecodeGemm(const GemmArgs& a, bool gate_up, bool rows16, bool one_mul, int max_tiles,
                      cudaStream_t stream) {
  if (max_tiles <= 0) return;
  // 8-row tiles: for the smallest batches (<= 4 token-slots: one CTA's load is all there is) the
  // one-shot bulk kernel; else, and for 16-row tiles, the K-streamed TMA kernel
  // (moe_cuda_decode_kst.cu); where that cannot run (no tensor-map encoder, or two stages do not
  // fit) the register ring. Variant::decode_pin pins one.
  const int pinned = CurrentVariant().decode_pin;
  const int kst_slice = KstSlice();  // -1: another kernel is pinned
  const bool kst = kst_slice >= 0;
  if (!rows16 && pinned != 3) {
    const bool bulk_fits = DecodeBulkSmem(a) <= (113 << 10);
    const bool want_bulk = pinned == 2 || (pinned == 0 && a.rows <= 4);
    if (want_bulk && bulk_fits && Device().cc >= 90) {  // bulk copies: sm_90
      if (one_mul) LaunchDecodeBulk<true>(a, gate_up, max_tiles, stream);
      else LaunchDecodeBulk<false>(a, gate_up, max_tiles, stream);
      return;
    }
  }
  if (kst && LaunchDecodeKst(a, gate_up, one_mul, kst_slice, rows16 ? 16 : 8, max_tiles, stream) == 0) return;
  // The register ring. Activations through shared memory unless the tile's rows do not fit
  // (hidden > ~3000 at 8 rows, > ~3400 at 16) or Variant::smem_a is off.
  const bool smem_a_env = CurrentVariant().smem_a;
  const int rows = std::min(rows16 ? 16 : 8, std::max(1, a.rows));  // most rows a tile can have
  const size_t smem = size_t(rows) * (a.kp / 8 + 1) * 16;
  // 8-row tiles up to 48 KB (4+ CTAs per SM), 16-row tiles up to 108 KB (2 per SM).
  const bool smem_a = smem_a_env && smem <= size_t(rows16 ? 108 << 10 : 48 << 10);
  if (rows16 && smem_a) {
    if (one_mul) LaunchDecodeT<true, true, true>(a, gate_up, max_tiles, smem, stream);
    else LaunchDecodeT<true, false, true>(a, gate_up, max_tiles, smem, stream);
  } else if (rows16) {
    if (one_mul) LaunchDecodeT<true, true, false>(a, gate_up, max_tiles, 0, stream);
    else LaunchDecodeT<true, false, false>(a, gate_up, max_tiles, 0, stream);
  } else if (smem_a) {
    if (one_mul) LaunchDecodeT<false, true, true>(a, gate_up, max_tiles, smem, stream);
    else LaunchDecodeT<false, false, true>(a, gate_up, max_tiles, smem, stream);
  } else {
    if (one_mul) LaunchDecodeT<false, true, false>(a, gate_up, max_tiles, 0, stream);
    else LaunchDecodeT<false, false, false>(a, gate_up, max_tiles, 0, stream);
  }
}

}  // namespace mxserve::kernels::cuda::internal
