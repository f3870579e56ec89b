// How fast the decode kernels' way of streaming weights can read DRAM, without their math
// (`mxserve-bench-stream`, tests/gpu/run_all.sh stream). The kst decode kernels
// (kernels/cuda/moe_cuda_decode_kst.cu) stream each item's rows of the upload layout (one 11,520-byte
// row per 8-row group at gpt-oss's K = 2880) through S shared-memory stages, a K slice of every row
// per stage, one 2D TMA box per slice; a producer thread refills a stage once all consumer warps
// have released it. This program runs that ring over a buffer of such rows, the consumers only
// reading their share of each stage from shared memory (and, with work > 0, spending `work` FMAs
// per lane on it, in eight independent chains), so that each ring shape's read rate can be set
// beside a plain load loop's on the same bytes, in one run. Prints a markdown table.
//
// usage: mxserve-bench-stream [rows] [reps]   (rows of 11,520 bytes; default 36,720: the gate_up
// rows of 51 gpt-oss-120b experts, what 16 tokens hit)
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kernels/cuda/moe_cuda_gemm.cuh"
#include "kernels/cuda/moe_cuda_tma.h"

namespace kc = mxserve::kernels::cuda::internal;

namespace {

constexpr int kRowBytes = 11520;
constexpr int kWarps = 12;  // consumer warps per CTA, as the 8-row kst kernel

struct Ring {
  int box_rows, slice_bytes, stages, ctas_per_sm, work;
  bool tma2d;  // else one 1D bulk copy per row and slice
  bool early;  // consumers release a stage once read (into registers), before their work
};

__global__ void __launch_bounds__(32 * kWarps + 32) RingKernel(const __grid_constant__ CUtensorMap map,
                                                               const uint8_t* __restrict__ buf, int rows,
                                                               Ring r, uint32_t* sink) {
  extern __shared__ __align__(128) uint8_t smem[];
  __shared__ uint64_t full[8], empty[8];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int stage_bytes = r.box_rows * r.slice_bytes;
  const int slices = (kRowBytes + r.slice_bytes - 1) / r.slice_bytes;
  const int items = rows / r.box_rows;
  const int lo = int(int64_t(items) * blockIdx.x / gridDim.x), hi = int(int64_t(items) * (blockIdx.x + 1) / gridDim.x);
  if (threadIdx.x == 0) {
    for (int i = 0; i < r.stages; ++i) kc::MbarInit(&full[i], 1), kc::MbarInit(&empty[i], 32 * kWarps);
    kc::FenceMbarInit();
  }
  __syncthreads();
  if (warp == kWarps) {
    if (lane != 0) return;
    int q = 0, stage = 0;
    uint32_t phase = 0;
    for (int it = lo; it < hi; ++it) {
      for (int s = 0; s < slices; ++s, ++q) {
        if (q >= r.stages) kc::MbarWait(&empty[stage], phase ^ 1u);
        uint8_t* base = smem + stage * stage_bytes;
        const int c0 = s * r.slice_bytes, bytes = min(r.slice_bytes, kRowBytes - c0);
        if (r.tma2d) {
          kc::MbarExpectTx(&full[stage], stage_bytes);  // the box past the row's end arrives zeroed
          kc::TmaLoad2d(base, &map, &full[stage], c0 / 8, it * r.box_rows);
        } else {
          kc::MbarExpectTx(&full[stage], r.box_rows * bytes);
          for (int i = 0; i < r.box_rows; ++i) {
            kc::BulkCopyG2S(base + i * r.slice_bytes, buf + int64_t(it * r.box_rows + i) * kRowBytes + c0, bytes,
                            &full[stage]);
          }
        }
        if (++stage == r.stages) stage = 0, phase ^= 1u;
      }
    }
    return;
  }
  uint32_t acc = 0;
  float f[8];
  for (int i = 0; i < 8; ++i) f[i] = float(lane + i);
  int stage = 0;
  uint32_t phase = 0;
  const int share = stage_bytes / kWarps / 16 * 16;
  for (int it = lo; it < hi; ++it) {
    for (int s = 0; s < slices; ++s) {
      kc::MbarWait(&full[stage], phase);
      const uint8_t* base = smem + stage * stage_bytes + warp * share;
      for (int o = lane * 16; o < share; o += 512) {
        const uint4 v = *reinterpret_cast<const uint4*>(base + o);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
      }
      if (r.early) kc::MbarArrive(&empty[stage]);
      for (int i = 0; i < r.work; i += 8) {
#pragma unroll
        for (int j = 0; j < 8; ++j) f[j] = fmaf(f[j], 1.0001f, 0.5f);
      }
      if (!r.early) kc::MbarArrive(&empty[stage]);
      if (++stage == r.stages) stage = 0, phase ^= 1u;
    }
  }
  float t = 0.f;
  for (int i = 0; i < 8; ++i) t += f[i];
  if (acc == 0x9E3779B9u || t == 1.2345f) *sink = acc;
}

// The ceiling: every byte read once by 16-byte loads, non-allocating in L1 (LdStream16).
__global__ void LoadKernel(const uint8_t* __restrict__ p, size_t n16, uint32_t* sink) {
  uint32_t acc = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n16; i += size_t(gridDim.x) * blockDim.x) {
    const uint4 v = kc::LdStream16(p + 16 * i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9E3779B9u) *sink = acc;
}

void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int rows = argc > 1 ? std::atoi(argv[1]) : 36720;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 15;
  const size_t bytes = size_t(rows) * kRowBytes;
  uint8_t *buf, *flush;
  uint32_t* sink;
  Check(cudaMalloc(&buf, bytes + (1 << 20)), "cudaMalloc");
  Check(cudaMalloc(&flush, size_t(512) << 20), "cudaMalloc flush");
  Check(cudaMalloc(&sink, 4), "cudaMalloc sink");
  Check(cudaMemset(buf, 0x5A, bytes), "memset");
  int sms = 0;
  Check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0), "attr");
  Check(cudaFuncSetAttribute(RingKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (227 << 10) - 1024), "smem attr");
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  auto time = [&](auto launch) {
    std::vector<float> ms;
    for (int i = 0; i < reps + 2; ++i) {
      Check(cudaMemsetAsync(flush, i & 0xFF, size_t(512) << 20), "flush");
      cudaEventRecord(a);
      launch();
      cudaEventRecord(b);
      Check(cudaEventSynchronize(b), "kernel");
      float t;
      cudaEventElapsedTime(&t, a, b);
      if (i >= 2) ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  };
  std::printf("# %d rows of %d bytes (%.1f MB), median of %d, 512 MB memset before each\n", rows, kRowBytes,
              bytes / 1e6, reps);
  std::printf("| reader | box rows | slice B | stages | CTAs/SM | stage KB | work | release | us | GB/s |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  const float ld = time([&] { LoadKernel<<<sms * 8, 512>>>(buf, bytes / 16, sink); });
  std::printf("| 16-byte loads | | | | | | | | %.1f | %.0f |\n", 1e3 * ld, bytes / ld / 1e6);
  std::vector<Ring> rings;
  for (int work : {0, 512, 768}) {
    for (bool early : {false, true}) {
      if (work == 0 && early) continue;
      for (int cb : {1, 2}) {
        for (int br : {24, 48}) {
          for (int sb : {1024, 1536, 2048}) {
            const int stage = br * sb, cap = std::min((227 << 10) - 1024, (228 << 10) / cb - 3072);
            for (int st : {2, 3, 4}) {
              if (st * stage <= cap && (cb == 2 || br == 48)) rings.push_back({br, sb, st, cb, work, true, early});
            }
          }
        }
      }
    }
  }
  for (const Ring& r : rings) {
    CUtensorMap map;
    if (kc::EncodeRows(&map, buf, rows, kRowBytes, r.slice_bytes, r.box_rows) != CUDA_SUCCESS) {
      std::printf("| ring %d x %d: no tensor map |\n", r.box_rows, r.slice_bytes);
      continue;
    }
    const size_t smem = size_t(r.stages) * r.box_rows * r.slice_bytes;
    const int grid = std::min(sms * r.ctas_per_sm, rows / r.box_rows);
    const float t = time([&] { RingKernel<<<grid, 32 * kWarps + 32, smem>>>(map, buf, rows, r, sink); });
    Check(cudaGetLastError(), "ring launch");
    std::printf("| %s | %d | %d | %d | %d | %.0f | %d | %s | %.1f | %.0f |\n", r.tma2d ? "TMA 2D ring" : "bulk ring",
                r.box_rows, r.slice_bytes, r.stages, r.ctas_per_sm, smem / 1024.0 / r.stages, r.work,
                r.early ? "read" : "after work", 1e3 * t,
                size_t(rows / r.box_rows) * r.box_rows * kRowBytes / t / 1e6);
    std::fflush(stdout);
  }
  return 0;
}
