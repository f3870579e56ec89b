// The fused decode kernel's partial exchange (moe_cuda_fused.cu, the piece's end) in isolation,
// to read compute-sanitizer racecheck's reports on it: each warp stores a partial to shared
// memory, __syncwarp, lane 0 adds 1 to the unit's count with atom.acq_rel.cta; the warp that
// brings the count to kParts reads every part after __syncwarp. Modes:
//   atomic  the fused kernel's pattern (ordered by the PTX memory model: release/acquire at CTA
//           scope, bar.warp.sync ordering the lanes around lane 0's atomic);
//   barrier the same exchange ordered by __syncthreads (racecheck's own synchronization: control);
//   none    the warp of the last part reads the others' partials unordered (a real race:
//           racecheck must report it; the sums may still come out right).
// And the K-streamed decode kernel's stage ring (moe_cuda_decode_kst.cu): one producer thread
// fills S = 2 stages by bulk copies completing a `full` mbarrier; 4 consumer warps read a stage,
// __syncwarp, and release it on an `empty` mbarrier before the producer refills it:
//   ring     lane 0 of each warp arrives (empty counts warps: an earlier kst form);
//   ring-all every lane arrives (empty counts threads: the kst kernels since);
//   ring-no  lane 0 releases the stage before the warp reads it (a real race).
// Prints "<mode> sums ok" or "<mode> sums WRONG n" (Report). Run by
// tests/gpu/run_all.sh racecheck under compute-sanitizer --tool racecheck.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>

#include "kernels/cuda/moe_cuda_gemm.cuh"

namespace {

using namespace mxserve::kernels::cuda::internal;

// The modes, in names[] order; kNone and kRingNo are the real races.
enum Mode { kAtomic, kBarrier, kNone, kRing, kRingAll, kRingNo };

constexpr int kParts = 4, kUnits = 64, kWarps = 8;

// Piece p = unit p / kParts, part p % kParts, taken by warp p % kWarps; the partial is
// 1000 * unit + part per lane, so the unit's sum is kParts * 1000 * unit + 0 + 1 + ... .
__global__ void Exchange(Mode mode, float* out) {
  __shared__ float part[kUnits * kParts * 32];
  __shared__ int cnt[kUnits];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int i = threadIdx.x; i < kUnits; i += blockDim.x) cnt[i] = 0;
  __syncthreads();
  for (int p = warp; p < kUnits * kParts; p += kWarps) {
    const int unit = p / kParts, pt = p % kParts;
    part[p * 32 + lane] = 1000.f * unit + pt + lane;
    if (mode == kBarrier) continue;
    __syncwarp();
    int last = 0;
    if (lane == 0) last = mode == kAtomic ? AtomAddAcqRelCta(&cnt[unit], 1) == kParts - 1 : pt == kParts - 1;
    if (!__shfl_sync(0xffffffffu, last, 0)) continue;
    __syncwarp();
    float s = 0.f;
    for (int q = 0; q < kParts; ++q) s += part[(unit * kParts + q) * 32 + lane];
    out[unit * 32 + lane] = s;
  }
  if (mode != kBarrier) return;
  __syncthreads();
  for (int i = threadIdx.x; i < kUnits * 32; i += blockDim.x) {
    float s = 0.f;
    for (int q = 0; q < kParts; ++q) s += part[(i / 32 * kParts + q) * 32 + i % 32];
    out[i] = s;
  }
}

constexpr int kUses = 16, kStageInts = 32 * 4, kConsumers = 4;

// Use q's stage holds src[q * kStageInts ...]; consumer warp w adds lane's 4 ints of it.
__global__ void Ring(Mode mode, const int* src, int* out) {
  __shared__ __align__(128) int stage_buf[2][kStageInts];
  __shared__ uint64_t full[2], empty[2];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int i = 0; i < 2; ++i) MbarInit(&full[i], 1), MbarInit(&empty[i], mode == kRingAll ? 32 * kConsumers : kConsumers);
    FenceMbarInit();
  }
  __syncthreads();
  if (warp == kConsumers) {
    if (lane != 0) return;
    for (int q = 0; q < kUses; ++q) {
      if (q >= 2) MbarWait(&empty[q % 2], ((q / 2) & 1) ^ 1u);
      MbarExpectTx(&full[q % 2], kStageInts * 4);
      BulkCopyG2S(stage_buf[q % 2], src + q * kStageInts, kStageInts * 4, &full[q % 2]);
    }
    return;
  }
  int sum = 0;
  for (int q = 0; q < kUses; ++q) {
    MbarWait(&full[q % 2], (q / 2) & 1);
    if (mode == kRingNo && lane == 0) MbarArrive(&empty[q % 2]);
    for (int i = 0; i < 4; ++i) sum += stage_buf[q % 2][lane * 4 + i];
    __syncwarp();
    if (mode == kRingAll || (mode == kRing && lane == 0)) MbarArrive(&empty[q % 2]);
  }
  out[warp * 32 + lane] = sum;
}

// Prints "<mode> sums ok" or "<mode> sums WRONG n"; the exit status: 1 on a wrong sum, but for
// the real races (whose sums may come out either way).
int Report(const char* name, Mode mode, int wrong) {
  std::printf("%s sums %s", name, wrong == 0 ? "ok\n" : "WRONG ");
  if (wrong != 0) std::printf("%d\n", wrong);
  return wrong == 0 || mode == kNone || mode == kRingNo ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const char* names[] = {"atomic", "barrier", "none", "ring", "ring-all", "ring-no"};
  int m = -1;
  for (int i = 0; i < 6 && argc == 2; ++i)
    if (std::strcmp(argv[1], names[i]) == 0) m = i;
  if (m < 0) {
    std::fprintf(stderr, "usage: %s atomic|barrier|none|ring|ring-all|ring-no\n", argv[0]);
    return 2;
  }
  const Mode mode = static_cast<Mode>(m);
  if (mode >= kRing) {
    int h_src[kUses * kStageInts];
    for (int i = 0; i < kUses * kStageInts; ++i) h_src[i] = i % 977;
    int *src = nullptr, *out = nullptr;
    if (cudaMalloc(&src, sizeof(h_src)) != cudaSuccess || cudaMalloc(&out, kConsumers * 32 * 4) != cudaSuccess) return 3;
    cudaMemcpy(src, h_src, sizeof(h_src), cudaMemcpyHostToDevice);
    Ring<<<1, 32 * (kConsumers + 1)>>>(mode, src, out);
    int h[kConsumers * 32];
    if (cudaMemcpy(h, out, sizeof(h), cudaMemcpyDeviceToHost) != cudaSuccess) return 3;
    int wrong = 0;
    for (int w = 0; w < kConsumers; ++w)
      for (int l = 0; l < 32; ++l) {
        int want = 0;
        for (int q = 0; q < kUses; ++q)
          for (int i = 0; i < 4; ++i) want += h_src[q * kStageInts + l * 4 + i];
        wrong += h[w * 32 + l] != want;
      }
    return Report(names[m], mode, wrong);
  }
  float* d = nullptr;
  if (cudaMalloc(&d, kUnits * 32 * sizeof(float)) != cudaSuccess) return 3;
  Exchange<<<1, 32 * kWarps>>>(mode, d);
  float h[kUnits * 32];
  if (cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost) != cudaSuccess) return 3;
  int wrong = 0;
  for (int i = 0; i < kUnits * 32; ++i)
    wrong += h[i] != kParts * (1000.f * (i / 32) + i % 32) + kParts * (kParts - 1) / 2;
  return Report(names[m], mode, wrong);
}
