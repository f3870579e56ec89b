// The MXFP4 x bf16 grouped GEMM of the CUDA MoE path, private to kernels/cuda. One template
// serves gate_up (bias + gpt-oss SwiGLU epilogue, writes the down operand) and down (bias,
// routing weight, per-slot output). mma.sync m16n8k16 bf16 with fp32 accumulation; weights are
// streamed from global memory straight into registers (16-byte loads, one 512-byte run per warp)
// and decoded there; activations come through L1 in the same permuted order, so neither operand
// needs shared memory. Warps of a CTA split K (decode: enough loads in flight at one token)
// and/or N (prefill: the activation tile is shared through L1); split-K partials are summed in
// shared memory in a fixed order, so results are deterministic.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/moe_cuda_gemm_args.h"
#include "kernels/cuda/moe_cuda_pack.h"

namespace mxserve::kernels::cuda::internal {

__device__ __forceinline__ int PermIndex(int k, int nfull) {
  const int c = k >> 7, kk = k & 127;
  const int s4 = (c < nfull) ? 32 : 16;  // 4*S elements per lane
  const int s = kk >> 4, r = kk & 15;
  return (c << 7) + ((r & 7) >> 1) * s4 + (s << 2) + (r & 1) + ((r >> 3) << 1);
}

__device__ __forceinline__ uint4 LdStream16(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
__device__ __forceinline__ uint2 LdStream8(const void* p) {
  uint2 v;
  asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}

// %globaltimer, ns (the probes' phase stamps).
__device__ __forceinline__ uint64_t GlobalTimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// A load of *p ordered before every later load and store of this thread, seeing what was
// released (fence, release or acq_rel atomic) at GPU scope before the value it reads.
__device__ __forceinline__ uint32_t LdAcquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// Programmatic dependent launch (sm_90): a kernel launched with LaunchPdl may start while the
// kernel before it on the stream is still running. PdlWait blocks until that kernel has finished
// and its writes are visible; nothing the previous kernel writes may be read before it.
// PdlLaunchDependents lets the next PDL kernel start (its CTAs then wait in PdlWait). Both are
// no-ops for a kernel launched the ordinary way, and empty where the portable kernels are built
// for cards before sm_90 (MXSERVE_SM90 0: they are never launched with PDL there).
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#define MXSERVE_SM90 1
#else
#define MXSERVE_SM90 0
#endif
#if MXSERVE_SM90
__device__ __forceinline__ void PdlWait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void PdlLaunchDependents() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}
#else
__device__ __forceinline__ void PdlWait() {}
__device__ __forceinline__ void PdlLaunchDependents() {}
#endif

// 16-byte global -> shared copy that does not hold a register (completes at CpAsyncWaitAll).
__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void CpAsyncWaitAll() {
  asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;" ::: "memory");
}

// mbarrier + bulk copy (sm_90 copy engine): one thread asks for N bytes, the barrier's phase
// completes when they have all landed in shared memory.
__device__ __forceinline__ uint32_t SmemAddr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
// old = *p; *p += v, acquire and release at CTA scope (a shared-memory count that publishes the
// stores ordered before it; racecheck does not model this ordering: tests/gpu/racecheck_pattern.cu).
__device__ __forceinline__ int AtomAddAcqRelCta(int* p, int v) {
  int old;
  asm volatile("atom.acq_rel.cta.shared::cta.add.u32 %0, [%1], %2;" : "=r"(old) : "r"(SmemAddr(p)), "r"(v) : "memory");
  return old;
}
__device__ __forceinline__ void MbarInit(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(SmemAddr(bar)), "r"(count) : "memory");
}
// Makes initialised barriers visible to the copy engine (the async proxy).
__device__ __forceinline__ void FenceMbarInit() {
  asm volatile("fence.mbarrier_init.release.cluster;\nfence.proxy.async.shared::cta;" ::: "memory");
}
__device__ __forceinline__ void MbarExpectTx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(SmemAddr(bar)), "r"(bytes)
               : "memory");
}
// MbarWaitAt / MbarArriveAt take the barrier's shared-memory address, computed once by a caller
// whose hot loop would otherwise redo the generic-to-shared conversion at every call (the wgmma
// GEMM's); MbarWait / MbarArrive convert it themselves.
__device__ __forceinline__ void MbarArriveAt(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void MbarArrive(uint64_t* bar) { MbarArriveAt(SmemAddr(bar)); }
// dst, src 16-byte aligned; bytes a multiple of 16.
__device__ __forceinline__ void BulkCopyG2S(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
          SmemAddr(dst)),
      "l"(src), "r"(bytes), "r"(SmemAddr(bar))
      : "memory");
}
// The L2 eviction policy of data read once (weights streamed by a decode kernel): evict_first,
// so that its lines, not dirty lines of earlier kernels (written back first), are the victims of
// later misses; else evict_normal (the policy of unhinted loads).
__device__ __forceinline__ uint64_t L2ReadOncePolicy(bool evict_first) {
  uint64_t pol;
  if (evict_first) {
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
  } else {
    asm volatile("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(pol));
  }
  return pol;
}
// Which of token t's top_k slots hold an expert of this worker (bit j: slot j; top_k <= 32).
__device__ __forceinline__ uint32_t HeldSlots(const int32_t* ids, const int32_t* local, int num_experts, int top_k,
                                              int t) {
  uint32_t valid = 0;
  for (int j = 0; j < top_k; ++j) {
    const int e = __ldg(ids + t * top_k + j);
    if (e >= 0 && e < num_experts && __ldg(local + e) >= 0) valid |= 1u << j;
  }
  return valid;
}
// Float4 column c of token t's combined row: the sum of y[t * top_k + j] over the slots j in
// `valid`, in slot order from zero (the combine's one order: the paired launch's folded combine
// and CombineKernel give the same bits). L2 loads: y may come from this very kernel.
__device__ __forceinline__ float4 SumSlots(const float* y, uint32_t valid, int top_k, int h, int t, int c) {
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 4
  for (int j = 0; j < top_k; ++j) {
    if (!(valid >> j & 1u)) continue;
    const float4 v = __ldcg(reinterpret_cast<const float4*>(y + int64_t(t * top_k + j) * h) + c);
    acc.x += v.x; acc.y += v.y; acc.z += v.z; acc.w += v.w;
  }
  return acc;
}
// BulkCopyG2S under L2 cache policy `pol` (L2ReadOncePolicy).
__device__ __forceinline__ void BulkCopyG2SHint(void* dst, const void* src, uint32_t bytes, uint64_t* bar,
                                                uint64_t pol) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(
          SmemAddr(dst)),
      "l"(src), "r"(bytes), "r"(SmemAddr(bar)), "l"(pol)
      : "memory");
}
__device__ __forceinline__ void MbarWaitAt(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred P1;\nLAB_WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
      "@P1 bra DONE;\nbra LAB_WAIT;\nDONE:\n}" ::"r"(bar),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void MbarWait(uint64_t* bar, uint32_t parity) { MbarWaitAt(SmemAddr(bar), parity); }
// MbarWait for a waiter with slack (the persistent wgmma kernel's epilogue-operand warps, which
// wait a whole tile for a buffer): sleeps between polls instead of spinning, which took 15 % of
// that kernel's stall samples and 9 % of its issued instructions from the consumer warps.
__device__ __forceinline__ void MbarWaitSleeping(uint64_t* bar, uint32_t parity) {
  const uint32_t a = SmemAddr(bar);
  for (;;) {
    uint32_t done;
    asm volatile(
        "{\n.reg .pred P1;\nmbarrier.try_wait.parity.shared::cta.b64 P1, [%1], %2;\nselp.u32 %0, 1, 0, P1;\n}"
        : "=r"(done)
        : "r"(a), "r"(parity)
        : "memory");
    if (done) return;
    __nanosleep(256);
  }
}

__device__ __forceinline__ uint32_t Bf16x2Mul(uint32_t a, uint32_t b) {
  uint32_t d;
#if MXSERVE_SM90
  asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
#else  // sm_80 has no bf16x2 mul: a * b + (-0) is the same rounding, sign and NaN
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(0x80008000u));
#endif
  return d;
}

// E8M0 -> bf16x2 multiplier 2^(s-127) (0x00 -> 2^-127, 0xFF -> NaN), times 2^126 folded in
// where it stays representable; otherwise the decode applies 2^126 separately.
__device__ __forceinline__ uint32_t ScaleBf16x2(uint32_t s) {
  uint32_t v = s << 7;
  v = (s == 0) ? 0x0040u : v;
  v = (s == 255) ? 0x7FC0u : v;
  return v | (v << 16);
}

// Mma into a fresh accumulator: d = a x b (C = 0).
__device__ __forceinline__ void Mma0(float d[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                     uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%10,%10,%10,%10};"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(0.f));
}

__device__ __forceinline__ void Mma(float c[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                    uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint16_t F2Bf16(float f) {
  __nv_bfloat16 b = __float2bfloat16_rn(f);
  return *reinterpret_cast<uint16_t*>(&b);
}

// Fast-path scales (every byte of the layer <= 128, none 0xFF; checked at upload): the E2M1
// bias 2^126 and the block scale 2^(s-127) fold into one bf16 multiplier 2^(s-1), whose bf16
// exponent field is s + 126. sw: the scale word with 0x7E added to every byte (no carries).
__device__ __forceinline__ uint32_t FoldedScale(uint32_t sw, int b) {
  // byte b into bytes 0 and 2 (PRMT), then into the exponent field of both halves.
  return __byte_perm(sw, 0u, 0x4040u | (0x0101u * uint32_t(b))) << 7;
}

// Decodes one packed word into four bf16x2 registers (mma.sync B fragments, or wgmma A
// fragments) scaled by block b's E8M0 scale of the scale word. DecodeScaledPre takes the scale
// word with the fast path's 0x7E per byte already added (kOneMul; the raw word otherwise): what a
// loop that decodes four blocks of one scale word uses.
template <bool kOneMul>
__device__ __forceinline__ void DecodeScaledPre(uint32_t w, uint32_t sword, int b, uint32_t (&r)[4]) {
  Decode4(w, r);
  if constexpr (kOneMul) {
    const uint32_t m = FoldedScale(sword, b);
#pragma unroll
    for (int j = 0; j < 4; ++j) r[j] = Bf16x2Mul(r[j], m);
  } else {
    const uint32_t m = ScaleBf16x2((sword >> (8 * b)) & 0xFFu);
#pragma unroll
    for (int j = 0; j < 4; ++j) r[j] = Bf16x2Mul(Bf16x2Mul(r[j], 0x7E807E80u), m);
  }
}
template <bool kOneMul>
__device__ __forceinline__ void DecodeScaled(uint32_t w, uint32_t sword, int b, uint32_t (&r)[4]) {
  DecodeScaledPre<kOneMul>(w, kOneMul ? sword + 0x7E7E7E7Eu : sword, b, r);
}

// Chunk c of an 8-row group from shared memory: a full 128-K chunk, or (kTail) the 64-K tail chunk.
// Tokens are mma rows 0..7 (rows 8..15 zero); sw/ss = the group's weights and scales in the upload
// layout, arow = this lane's activation row at element t*32 of chunk 0 (bf16, permuted order, 256
// bytes per chunk). Two accumulator chains alternate.
template <bool kOneMul, bool kTail>
__device__ __forceinline__ void SmemChunkMma(float (&acc)[2][4], const uint8_t* sw, const uint8_t* ss,
                                             const uint8_t* arow, int c, int lane) {
  const int g = lane >> 2, t = lane & 3;
  const uint32_t sword = *reinterpret_cast<const uint32_t*>(ss + c * 32 + g * 4);
  auto block = [&](float (&c4)[4], uint32_t wd, int b, const uint4& al) {
    uint32_t r[4];
    DecodeScaled<kOneMul>(wd, sword, b, r);
    Mma(c4, al.x, 0u, al.y, 0u, r[0], r[1]);
    Mma(c4, al.z, 0u, al.w, 0u, r[2], r[3]);
  };
  if constexpr (!kTail) {
    const uint4 q = *reinterpret_cast<const uint4*>(sw + c * 512 + lane * 16);
    uint4 al[4];
#pragma unroll
    for (int b = 0; b < 4; ++b) al[b] = *reinterpret_cast<const uint4*>(arow + c * 256 + 16 * b);
    block(acc[0], q.x, 0, al[0]);
    block(acc[1], q.y, 1, al[1]);
    block(acc[0], q.z, 2, al[2]);
    block(acc[1], q.w, 3, al[3]);
  } else {  // tail: 8 bytes per lane, two blocks, 16 elements per lane
    const uint2 q = *reinterpret_cast<const uint2*>(sw + c * 512 + lane * 8);
    const uint8_t* tr = arow - t * 32 + c * 256;
    block(acc[0], q.x, 0, *reinterpret_cast<const uint4*>(tr));
    block(acc[1], q.y, 1, *reinterpret_cast<const uint4*>(tr + 16));
  }
}

// gpt-oss SwiGLU of one (gate, up) pair: gate clamped above, up clamped both ways, at `limit`.
__device__ __forceinline__ float GptOssSwiglu(float gate, float up, float alpha, float limit) {
  if (gate > limit) gate = limit;
  if (up > limit) up = limit;
  if (up < -limit) up = -limit;
  return (up + 1.0f) * gate * (1.0f / (1.0f + expf(-alpha * gate)));
}

// One k32 block (two k16 steps) for all (mt, nt) of the warp. w[i]: the lane's packed word of
// this block for n-tile i (registers: step 2b k-lo, k-hi, step 2b+1 k-lo, k-hi); sc[i]: its
// scale as bf16x2. a_lo/a_hi: rows g and g+8, this block's 8 elements each in lane order.
template <int MT, int NW>
__device__ __forceinline__ void BlockMma(float (&acc)[MT][NW][4], const uint4 (&a_lo)[MT],
                                         const uint4 (&a_hi)[MT], const uint32_t (&w)[NW],
                                         const uint32_t (&sc)[NW]) {
  constexpr uint32_t kBias = 0x7E807E80u;  // 2^126 in both halves
#pragma unroll
  for (int i = 0; i < NW; ++i) {
    uint32_t r[4];
    Decode4(w[i], r);
#pragma unroll
    for (int j = 0; j < 4; ++j) r[j] = Bf16x2Mul(Bf16x2Mul(r[j], kBias), sc[i]);
#pragma unroll
    for (int m = 0; m < MT; ++m) {
      Mma(acc[m][i], a_lo[m].x, a_hi[m].x, a_lo[m].y, a_hi[m].y, r[0], r[1]);
      Mma(acc[m][i], a_lo[m].z, a_hi[m].z, a_lo[m].w, a_hi[m].w, r[2], r[3]);
    }
  }
}

// The activations of a kernel that scales after the mma (BlockMmaA kPost) are stored times
// kPostActScale, so that the products of raw decoded weights (E2M1 x 2^-126, bf16) are fp32
// normals; PostScale's multiplier takes it out again (both powers of two: exact).
constexpr float kPostActScale = 18446744073709551616.f;  // 2^64
// Block b's E8M0 scale s as the fp32 2^(s - 65) = 2^(s - 127) x 2^126 (E2M1 bias) x 2^-64
// (kPostActScale): exponent field s + 62. sw: the scale word with 0x3E added to every byte (no
// carries: fast-path scales are <= 128): byte b into bits 31..24 (PRMT), then down one.
__device__ __forceinline__ float PostScale(uint32_t sw, int b) {
  return __uint_as_float(__byte_perm(sw, 0u, 0x0444u | (uint32_t(b) << 12)) >> 1);
}

// One k32 block b of one m16 tile of the weights-as-A decode kernel (moe_cuda_decode_kst.cu):
// groups A (rows g) and B (rows g + 8), qa/qb the lane's packed words of the block, swa/swb the
// groups' scale words, times kNb groups of 8 tokens (xb[j]: the lane's B fragments of token 8j + g
// for the block's two k16 steps). acc[j][0]/acc[j][1]: token group j, even/odd steps. Each decoded
// weight word feeds kNb mma.
// kPost (fast-path scales, kOneMul; activations times kPostActScale: the fused one-token kernel):
// the block scales after the mma instead, the raw decoded words into a fresh accumulator per
// token group, then its rows' two scales in fp32 (PostScale: 2 PRMT + 2 SHF and 4 FFMA per group
// in place of 8 HMUL2 and two folded scales), summed into acc[j][0].
template <bool kOneMul, int kNb, bool kPost = false>
__device__ __forceinline__ void BlockMmaA(float (&acc)[kNb][2][4], uint32_t qa, uint32_t qb, uint32_t swa,
                                          uint32_t swb, int b, const uint4 (&xb)[kNb]) {
  static_assert(!kPost || kOneMul, "scales after the mma need the fast-path scales");
  uint32_t ra[4], rb[4];
  if constexpr (kPost) {
    Decode4(qa, ra);
    Decode4(qb, rb);
    const float fa = PostScale(swa + 0x3E3E3E3Eu, b), fb = PostScale(swb + 0x3E3E3E3Eu, b);
#pragma unroll
    for (int j = 0; j < kNb; ++j) {
      float d[4];
      Mma0(d, ra[0], rb[0], ra[1], rb[1], xb[j].x, xb[j].y);
      Mma(d, ra[2], rb[2], ra[3], rb[3], xb[j].z, xb[j].w);
      acc[j][0][0] = fmaf(d[0], fa, acc[j][0][0]);
      acc[j][0][1] = fmaf(d[1], fa, acc[j][0][1]);
      acc[j][0][2] = fmaf(d[2], fb, acc[j][0][2]);
      acc[j][0][3] = fmaf(d[3], fb, acc[j][0][3]);
    }
  } else {
    DecodeScaled<kOneMul>(qa, swa, b, ra);
    DecodeScaled<kOneMul>(qb, swb, b, rb);
#pragma unroll
    for (int j = 0; j < kNb; ++j) {
      Mma(acc[j][0], ra[0], rb[0], ra[1], rb[1], xb[j].x, xb[j].y);
      Mma(acc[j][1], ra[2], rb[2], ra[3], rb[3], xb[j].z, xb[j].w);
    }
  }
}

// The outputs of one m16 x n8 tile of the weights-as-A decode kernel (moe_cuda_decode_kst.cu): v = (feature fa, token t0), (fa, t1), (fb, t0), (fb, t1), t0 = 2t,
// t1 = 2t + 1; ba/bb the features' biases; fb's group may lie past the layer (b_ok false); tokens
// from `rows` on are not stored. gate_up: bias + SwiGLU of the (gate, up) pairs = features
// (2i, 2i + 1), rows g and g + 1 of a group, lanes 4 apart (so the whole warp must call this),
// written to the down GEMM's operand. down: bias, times each token-slot's routing weight.
struct TileSlotsA {
  int row0, rows;    // the tile's first row (token-slot) and its row count
  int pair0, pair1;  // down: the slots' pair indices (tokens t0, t1)
  float w0, w1;      // down: their routing weights
};
template <bool kGateUp>
__device__ __forceinline__ void StoreTileA(const GemmArgs& p, float (&v)[4], float ba, float bb, int fa,
                                           int fb, bool b_ok, int g, int t, const TileSlotsA& s,
                                           float act_mul = 1.f) {
  const int t0 = 2 * t, t1 = 2 * t + 1;
  v[0] += ba;
  v[1] += ba;
  v[2] += bb;
  v[3] += bb;
  if constexpr (kGateUp) {
    float u[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) u[k] = __shfl_xor_sync(0xffffffffu, v[k], 4);
    if ((g & 1) == 0) {
      const int ia = PermIndex(fa >> 1, p.nfull_out), ib = PermIndex(fb >> 1, p.nfull_out);
      uint16_t* act0 = p.act + int64_t(s.row0 + t0) * p.kp_out;
      uint16_t* act1 = p.act + int64_t(s.row0 + t1) * p.kp_out;
      if (t0 < s.rows) act0[ia] = F2Bf16(act_mul * GptOssSwiglu(v[0], u[0], p.alpha, p.limit));
      if (t1 < s.rows) act1[ia] = F2Bf16(act_mul * GptOssSwiglu(v[1], u[1], p.alpha, p.limit));
      if (b_ok && t0 < s.rows) act0[ib] = F2Bf16(act_mul * GptOssSwiglu(v[2], u[2], p.alpha, p.limit));
      if (b_ok && t1 < s.rows) act1[ib] = F2Bf16(act_mul * GptOssSwiglu(v[3], u[3], p.alpha, p.limit));
    }
  } else {
    if (t0 < s.rows) p.y[int64_t(s.pair0) * p.n + fa] = s.w0 * v[0];
    if (t1 < s.rows) p.y[int64_t(s.pair1) * p.n + fa] = s.w1 * v[1];
    if (b_ok && t0 < s.rows) p.y[int64_t(s.pair0) * p.n + fb] = s.w0 * v[2];
    if (b_ok && t1 < s.rows) p.y[int64_t(s.pair1) * p.n + fb] = s.w1 * v[3];
  }
}

// Item `item` of a gathered activation row: its 8 bf16 values (16 bytes, for element item * 8),
// from four float2 of the token's row (0 past h): in the permuted order (one lane's k32 block: two
// k16 steps, each k 2tt,2tt+1 then 2tt+8,2tt+9), or (plain, the wgmma paths') k = 8 item .. + 7.
__device__ __forceinline__ uint4 GatherLoad(const float* __restrict__ xr, int item, int nfull, int h,
                                            bool plain, float mul = 1.f) {
  const int d = item * 8, c = d >> 7, w = d & 127;
  const int s4 = c < nfull ? 32 : 16;
  const int tt = w / s4, b = (w % s4) >> 3;
  const int k0 = (c << 7) + 2 * tt + 32 * b;  // step 2b; step 2b+1 is k0 + 16
  uint32_t v[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int k = plain ? d + 2 * i : k0 + (i >> 1) * 16 + (i & 1) * 8;
    const float2 f = k < h ? __ldg(reinterpret_cast<const float2*>(xr + k)) : make_float2(0.f, 0.f);
    v[i] = uint32_t(F2Bf16(mul * f.x)) | (uint32_t(F2Bf16(mul * f.y)) << 16);
  }
  return make_uint4(v[0], v[1], v[2], v[3]);
}

// GatherLoad's item stored into row ar (times mul: kPostActScale for a post-scaling kernel).
__device__ __forceinline__ void GatherItem(const float* __restrict__ xr, uint16_t* __restrict__ ar,
                                           int item, int nfull, int h, bool plain = false, float mul = 1.f) {
  *reinterpret_cast<uint4*>(ar + item * 8) = GatherLoad(xr, item, nfull, h, plain, mul);
}

}  // namespace mxserve::kernels::cuda::internal
