// The fused decode kernel's partial exchange (moe_cuda_fused.cu, the piece's end) in isolation,
// to read compute-sanitizer racecheck's reports on it: each warp stores a partial to shared
// memory, __syncwarp, lane 0 adds 1 to the unit's count with atom.acq_rel.cta; the warp that
// brings the count to kParts reads every part after __syncwarp. Modes:
//   atomic  the fused kernel's pattern (ordered by the PTX memory model: release/acquire at CTA
//           scope, bar.warp.sync ordering the lanes around lane 0's atomic);
//   barrier the same exchange ordered by __syncthreads (racecheck's own synchronization: control);
//   none    the warp of the last part reads the others' partials unordered (a real race:
//           racecheck must report it; the sums may still come out right).
// Prints "<mode> sums ok" or "<mode> sums WRONG n" and exits 1 on a wrong sum. Run by
// tests/gpu/run_all.sh racecheck under compute-sanitizer --tool racecheck.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>

namespace {

constexpr int kParts = 4, kUnits = 64, kWarps = 8;

__device__ __forceinline__ int AtomAddAcqRelCta(int* p, int v) {
  int old;
  asm volatile("atom.acq_rel.cta.shared::cta.add.u32 %0, [%1], %2;"
               : "=r"(old)
               : "r"(static_cast<unsigned>(__cvta_generic_to_shared(p))), "r"(v)
               : "memory");
  return old;
}

// Piece p = unit p / kParts, part p % kParts, taken by warp p % kWarps; the partial is
// 1000 * unit + part per lane, so the unit's sum is kParts * 1000 * unit + 0 + 1 + ... .
__global__ void Exchange(int mode, float* out) {
  __shared__ float part[kUnits * kParts * 32];
  __shared__ int cnt[kUnits];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int i = threadIdx.x; i < kUnits; i += blockDim.x) cnt[i] = 0;
  __syncthreads();
  for (int p = warp; p < kUnits * kParts; p += kWarps) {
    const int unit = p / kParts, pt = p % kParts;
    part[p * 32 + lane] = 1000.f * unit + pt + lane;
    if (mode == 1) continue;
    __syncwarp();
    int last = 0;
    if (lane == 0) last = mode == 0 ? AtomAddAcqRelCta(&cnt[unit], 1) == kParts - 1 : pt == kParts - 1;
    if (!__shfl_sync(0xffffffffu, last, 0)) continue;
    __syncwarp();
    float s = 0.f;
    for (int q = 0; q < kParts; ++q) s += part[(unit * kParts + q) * 32 + lane];
    out[unit * 32 + lane] = s;
  }
  if (mode != 1) return;
  __syncthreads();
  for (int i = threadIdx.x; i < kUnits * 32; i += blockDim.x) {
    float s = 0.f;
    for (int q = 0; q < kParts; ++q) s += part[(i / 32 * kParts + q) * 32 + i % 32];
    out[i] = s;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const char* names[] = {"atomic", "barrier", "none"};
  int mode = -1;
  for (int m = 0; m < 3 && argc == 2; ++m)
    if (std::strcmp(argv[1], names[m]) == 0) mode = m;
  if (mode < 0) {
    std::fprintf(stderr, "usage: %s atomic|barrier|none\n", argv[0]);
    return 2;
  }
  float* d = nullptr;
  if (cudaMalloc(&d, kUnits * 32 * sizeof(float)) != cudaSuccess) return 3;
  Exchange<<<1, 32 * kWarps>>>(mode, d);
  float h[kUnits * 32];
  if (cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost) != cudaSuccess) return 3;
  int wrong = 0;
  for (int i = 0; i < kUnits * 32; ++i)
    wrong += h[i] != kParts * (1000.f * (i / 32) + i % 32) + kParts * (kParts - 1) / 2;
  std::printf("%s sums %s", names[mode], wrong == 0 ? "ok\n" : "WRONG ");
  if (wrong != 0) std::printf("%d\n", wrong);
  return wrong == 0 || mode == 2 ? 0 : 1;
}
