// The decode-regime grouped GEMM with the weights as the mma A operand ("wa"): few rows
// (token-slots) per expert, so the time is the weight stream and the per-weight instructions.
//
// Why: the kernels of moe_cuda_decode.cu put the tokens in the mma's 16-row A operand (8 of its
// 16 rows empty at decode) and the weights in B. The SASS of their inner loop spends 29
// instructions per packed weight word, 8 of them register moves that assemble the half-empty A
// fragments, and ncu showed the SM issuing 0.54 instructions per cycle per scheduler with DRAM
// 42 % busy (gpt-oss-120b, 64 tokens). Here two 8-row weight groups (rows g and g + 8 of an m16
// tile) are the A operand, decoded straight into its registers, and the tile's tokens are the
// n8 B operand, read from shared memory in the permuted order they already have. No operand is
// half empty, one mma consumes a whole decoded word, and the activation loads serve two groups.
// The packed layout is the one the other kernels use (moe_cuda_gemm_args.h): a lane's word for
// row g of a group holds exactly its A fragment registers for rows g (or g + 8) of two k16 steps.
//
// Work split: a persistent CTA per SM walks a contiguous range of items (tile, 4 consecutive n8
// groups). A producer warp has the copy engine (cp.async.bulk + mbarrier) fill S shared-memory
// stages, each refilled as soon as every consumer warp has released it (an "empty" mbarrier).
// 2 * KP consumer warps: warp (rp, kq) multiplies groups 2rp, 2rp + 1 over the kq-th of KP
// chunk-aligned K parts and adds its partial to the stage's slot; the last of the KP warps to
// arrive sums the slot in kq order (deterministic) and writes the outputs. No CTA-wide barrier:
// a warp goes on to its next item as soon as it has released the stage (ncu showed a per-item
// __syncthreads costing a third of the cycles). Because a CTA's items are contiguous,
// consecutive items nearly always belong to the same tile, and a stage whose previous item had
// the same tile keeps its activation rows: only the weights are copied again.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "kernels/cuda/moe_cuda_gemm.cuh"
#include "kernels/cuda/moe_cuda_launch.h"

namespace mxserve::kernels::cuda::internal {
namespace {

constexpr int kKp = 6;      // K parts: consumer warps per row pair (13 warps: <= 152 registers)
constexpr int kMaxC = 4;    // chunks a consumer warp may hold activations for (K <= 24 chunks: 3072)
constexpr int kMaxS = 4;    // stages

// A stage: 4 groups' weights (8 rows x kp/2 bytes each), then their scales.
__host__ __device__ inline int WaStageBytes(int kp, int chunks) { return 4 * 4 * kp + 4 * chunks * 32; }

template <bool kGateUp, bool kOneMul>
__global__ void __launch_bounds__(64 * kKp + 32, 1) DecodeWaKernel(const GemmArgs p, int S, int mode) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ uint64_t full[kMaxS], empty[kMaxS];
  __shared__ int arrived[kMaxS][2];             // per stage and row pair: K parts summed so far
  __shared__ float4 red[kMaxS][kKp][2][32];     // per stage: [kq][rp][lane] partial sums
  PdlWait();
  const int nvalid = __ldg(p.ntiles);
  PdlLaunchDependents();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int nt_total = p.n >> 3;
  const int groups = (nt_total + 3) / 4;
  const int64_t items = int64_t(nvalid) * groups;
  const int it_lo = int(items * blockIdx.x / gridDim.x), it_hi = int(items * (blockIdx.x + 1) / gridDim.x);
  const int nfull = p.nfull, chunks = p.chunks;
  const int rg_bytes = 4 * p.kp, sc_bytes = chunks * 32, w_bytes = 4 * rg_bytes;
  const int stage_bytes = WaStageBytes(p.kp, chunks);
  if (threadIdx.x == 0) {
    for (int i = 0; i < S; ++i) {
      MbarInit(&full[i], 1);
      MbarInit(&empty[i], 2 * kKp);
      arrived[i][0] = arrived[i][1] = 0;
    }
    FenceMbarInit();
  }
  __syncthreads();  // the only CTA-wide barrier: from here on warps meet only through mbarriers

  if (warp == 2 * kKp) {  // the producer warp (one thread): item -> stage once the stage is empty
    if (lane != 0) return;
    for (int j = 0; it_lo + j < it_hi; ++j) {
      const int item = it_lo + j, stage = j % S;
      if (j >= S) MbarWait(&empty[stage], ((j / S) - 1) & 1);
      const int tile = item / groups, nt0 = (item - tile * groups) * 4;
      const int e = __ldg(p.tiles + 3 * tile);
      const int nw = min(4, nt_total - nt0);
      uint8_t* base = smem + stage * stage_bytes;
      const int64_t rg = int64_t(e) * nt_total + nt0;
      if (mode == 2) {  // experiment: no copies
        MbarArrive(&full[stage]);
        continue;
      }
      MbarExpectTx(&full[stage], nw * (rg_bytes + sc_bytes));
      BulkCopyG2S(base, p.q + rg * rg_bytes, nw * rg_bytes, &full[stage]);
      BulkCopyG2S(base + w_bytes, p.sc + rg * sc_bytes, nw * sc_bytes, &full[stage]);
    }
    return;
  }

  // Consumer warps (rp, kq). The activations of the warp's K part stay in registers while its
  // items belong to one tile (a CTA's items are contiguous, so that is nearly always), loaded from
  // global memory when the tile changes. Each warp adds its partial to the stage's slot; the last
  // of the kKp warps of a row pair to arrive sums the slot in kq order (deterministic) and writes
  // the outputs. A warp then releases the stage and goes on without waiting for the others.
  const int rp = warp & 1, kq = warp >> 1;
  const int c_lo = kq * chunks / kKp, c_hi = (kq + 1) * chunks / kKp;
  uint4 x[kMaxC][1][4];  // [chunk][token group (one)][block]
  int cur_tile = -1, e = 0, row0 = 0, rows = 0, pair0 = 0, pair1 = 0;
  float w0 = 0.f, w1 = 0.f;
  const int t0 = 2 * t, t1 = 2 * t + 1;
  for (int j = 0; it_lo + j < it_hi; ++j) {
    const int item = it_lo + j, stage = j % S;
    const int tile = item / groups;
    const int ga = (item - tile * groups) * 4 + 2 * rp, gb = ga + 1;
    const bool a_ok = ga < nt_total, b_ok = gb < nt_total;
    if (tile != cur_tile) {
      cur_tile = tile;
      e = __ldg(p.tiles + 3 * tile);
      row0 = __ldg(p.tiles + 3 * tile + 1);
      rows = min(__ldg(p.tiles + 3 * tile + 2), 8);
      // Tokens past the tile read token 0: their mma columns are independent and never stored.
      const uint8_t* arow = reinterpret_cast<const uint8_t*>(p.a + int64_t(row0 + (g < rows ? g : 0)) * p.kp);
#pragma unroll
      for (int i = 0; i < kMaxC; ++i) {
        const int c = c_lo + i;
        if (c < c_hi) {
          const uint8_t* xc = arow + c * 256 + (c < nfull ? t * 64 : t * 32);
#pragma unroll
          for (int b = 0; b < 4; ++b) {
            if (c < nfull || b < 2) x[i][0][b] = __ldg(reinterpret_cast<const uint4*>(xc + 16 * b));
          }
        }
      }
      if constexpr (!kGateUp) {
        if (t0 < rows) pair0 = __ldg(p.sorted + row0 + t0);
        if (t1 < rows) pair1 = __ldg(p.sorted + row0 + t1);
        if (t0 < rows) w0 = __ldg(p.route_w + pair0);
        if (t1 < rows) w1 = __ldg(p.route_w + pair1);
      }
    }
    // Bias, requested before the wait (any warp may be the last to arrive).
    const int fa = ga * 8 + g, fb = gb * 8 + g;
    const float ba = a_ok ? __ldg(p.bias + int64_t(e) * p.n + fa) : 0.f;
    const float bb = b_ok ? __ldg(p.bias + int64_t(e) * p.n + fb) : 0.f;
    MbarWait(&full[stage], (j / S) & 1);
    const uint8_t* base = smem + stage * stage_bytes;
    // Group B past the layer's rows (odd n / 8 at the last item) reads group A's bytes: its mma
    // rows are independent and never stored.
    const uint8_t* wa = base + (2 * rp) * rg_bytes;
    const uint8_t* wb = b_ok ? wa + rg_bytes : wa;
    const uint8_t* sa = base + w_bytes + (2 * rp) * sc_bytes + g * 4;
    const uint8_t* sb = b_ok ? sa + sc_bytes : sa;
    float acc[1][2][4];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int k = 0; k < 4; ++k) acc[0][i][k] = 0.f;
    if (a_ok && mode != 1) {  // mode 1 (experiment): no multiply
#pragma unroll
      for (int i = 0; i < kMaxC; ++i) {
        const int c = c_lo + i;
        if (c < c_hi && c < nfull) ChunkMmaA<kOneMul, false>(acc, wa, wb, sa, sb, x[i], c, lane);
        else if (c < c_hi) ChunkMmaA<kOneMul, true>(acc, wa, wb, sa, sb, x[i], c, lane);
      }
    }
    red[stage][kq][rp][lane] = make_float4(acc[0][0][0] + acc[0][1][0], acc[0][0][1] + acc[0][1][1],
                                           acc[0][0][2] + acc[0][1][2], acc[0][0][3] + acc[0][1][3]);
    __threadfence_block();
    __syncwarp();
    int prev = 0;
    if (lane == 0) prev = atomicAdd(&arrived[stage][rp], 1);
    prev = __shfl_sync(0xffffffffu, prev, 0);
    if (prev == kKp - 1 && a_ok) {
      __threadfence_block();
      float v[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int q = 0; q < kKp; ++q) {
        const float4 o = red[stage][q][rp][lane];
        v[0] += o.x;
        v[1] += o.y;
        v[2] += o.z;
        v[3] += o.w;
      }
      StoreTileA<kGateUp>(p, v, ba, bb, fa, fb, b_ok, g, t, TileSlotsA{row0, rows, pair0, pair1, w0, w1});
    }
    __syncwarp();
    if (lane == 0) {
      if (prev == kKp - 1) arrived[stage][rp] = 0;
      MbarArrive(&empty[stage]);
    }
  }
}

// Stage bytes a CTA may have: the 227 KB limit less the static partial sums (kMaxS x kKp KB).
constexpr int kWaSmemLimit = (226 - kMaxS * kKp) << 10;

template <bool kOneMul>
void LaunchWaT(const GemmArgs& a, bool gate_up, int max_tiles, int stages, cudaStream_t stream) {
  static const bool raised = [] {
    cudaFuncSetAttribute(DecodeWaKernel<true, kOneMul>, cudaFuncAttributeMaxDynamicSharedMemorySize, kWaSmemLimit);
    cudaFuncSetAttribute(DecodeWaKernel<false, kOneMul>, cudaFuncAttributeMaxDynamicSharedMemorySize, kWaSmemLimit);
    return true;
  }();
  (void)raised;
  const unsigned grid = PersistentGrid(int64_t(max_tiles) * ((a.n / 8 + 3) / 4));
  auto k = gate_up ? DecodeWaKernel<true, kOneMul> : DecodeWaKernel<false, kOneMul>;
  // MXSERVE_CUDA_MOE_WA_EXPERIMENT=1 skips the multiply, =2 the copies (wrong results; for
  // measuring the copy pipeline and the multiply apart).
  static const int mode = [] {
    const char* v = std::getenv("MXSERVE_CUDA_MOE_WA_EXPERIMENT");
    return v == nullptr ? 0 : std::atoi(v);
  }();
  LaunchPdl(k, dim3(grid), dim3(64 * kKp + 32), size_t(stages) * WaStageBytes(a.kp, a.chunks), stream, a,
            stages, mode);
}

}  // namespace

bool LaunchDecodeWa(const GemmArgs& a, bool gate_up, bool one_mul, int max_tiles, cudaStream_t stream) {
  // A consumer warp holds ceil-ish(chunks / kKp) chunks of activations in registers.
  int most = 0;
  for (int kq = 0; kq < kKp; ++kq) most = std::max(most, (kq + 1) * a.chunks / kKp - kq * a.chunks / kKp);
  const int stages = std::min(kMaxS, kWaSmemLimit / WaStageBytes(a.kp, a.chunks));
  if (most > kMaxC || stages < 2) return false;
  if (one_mul) LaunchWaT<true>(a, gate_up, max_tiles, stages, stream);
  else LaunchWaT<false>(a, gate_up, max_tiles, stages, stream);
  return true;
}

}  // namespace mxserve::kernels::cuda::internal
