// Launchers of the CUDA MoE kernels (moe_cuda_kernels.cu), private to kernels/cuda.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/moe_cuda_plan.h"  // Path

namespace mxserve::kernels::cuda::internal {

struct GemmArgs;
struct SelfRoute;
struct TinyRoute;

// Programmatic dependent launch between the kernels of one call (Variant::pdl).
bool PdlEnabled();
// The fused kernel's weight copies go under an L2 evict_first policy (Variant::evict_first).
bool EvictFirst();

// Launches `kernel` so that it may start before the previous kernel on `stream` finishes (it must
// call PdlWait before reading anything that kernel writes); an ordinary launch when PDL is off.
template <typename... Params, typename... Args>
void LaunchPdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
               Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = PdlEnabled() ? 1 : 0;
  cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

// Raises kernel K's dynamic shared-memory limit to `bytes`, the first time it is called for K
// (once per kernel and process; every launcher calls it before its launch).
template <auto K>
void RaiseSmemOnce(int bytes) {
  static const bool raised = (cudaFuncSetAttribute(K, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), true);
  (void)raised;
}
// What the kernels' launch plans read of the current device, once per process (one device per
// process: the worker's): its SMs (at least 1), the most shared memory a block may opt in to, its
// peak memory bandwidth in GB/s (memory clock x 2 x bus width; 0 when the driver does not say) and
// its compute capability (major x 10 + minor: below 90 no sm_90a kernel is launched).
struct DeviceLimits {
  int sms = 1, smem_optin = 0;
  double peak_gbps = 0;
  int cc = 0;
};
const DeviceLimits& Device();
// Blocks of a persistent grid over `items` work items: one per SM (Device().sms), fewer when there
// are fewer items, at least one.
unsigned PersistentGrid(int64_t items);

struct RoutingArgs {
  const int32_t* ids;
  const int32_t* local;
  const float* x;
  int tokens, top_k, num_experts, nh, bm, hidden, kp_h;
  int32_t* meta;    // counts [nh], offsets [nh+1], cursors [nh], ntiles [1], ntiles2 [1]
  int32_t* tiles;
  // Two tile heights (moe_cuda_tile_choice.h: SplitTiles): bm2 > 0 cuts each expert's remainder
  // past its bm tiles, when at most rmax, into tiles of bm2 listed at tiles2 (their count in
  // ntiles2); bm2 = 0: one height (tiles2 unused).
  int bm2 = 0, rmax = 0;
  int32_t* tiles2 = nullptr;
  int32_t* sorted;
  uint16_t* a;
  bool plain_k = false;  // gather in plain K order (the wgmma paths'), not the mma.sync permuted one
};

void LaunchSwizzle(const uint8_t* src_q, const uint8_t* src_s, uint8_t* dst_q, uint8_t* dst_s,
                   int n, int k, int kp, cudaStream_t stream);
// Its last kernel gathers (GatherKernel or PlaceGatherKernel): the tile lists are written by a
// kernel before that, which GemmArgs::early_weights relies on.
void LaunchRouting(const RoutingArgs& r, cudaStream_t stream);
// The spec kAuto last chose in this process (-1: none yet; the GPU check prints it).
int LastAutoPath();
// Returns 0, or (wgmma paths) -1 when the driver has no tensor-map encoder / the CUresult of a
// failed encode: then nothing was launched and the call must fail (the tiles fit no other kernel).
// one_mul: the layer's scale bytes are all <= 128 (the folded-scale fast path). The ss paths run
// Variant::lab_gemm (-1 without it: only kernels/cuda/lab builds them).
int LaunchGemm(const GemmArgs& a, bool gate_up, int path, bool one_mul, int max_tiles, cudaStream_t stream);
// Whether the driver encodes tensor maps (the kst and wgmma kernels need them).
bool WgmmaAvailable();
// The wgmma GEMM (paths kPathWgmma .. kPathWgmma24, bn = their tile height): the TMA-fed
// register-A kernel (moe_cuda_wgmma_tma.cu), persistent at 8-24, 64, 96, 192 and 256 rows, or
// the lab's configuration where Variant::wgmma_cfg names one. Non-zero is -1 (no tensor-map
// encoder in this driver, or a bn that is not a wgmma tile height) or the failed encode's
// CUresult, and nothing was enqueued.
int LaunchWgmmaGemm(const GemmArgs& a, bool gate_up, bool one_mul, int bn, int max_tiles, cudaStream_t stream);
// The TMA-fed kernel itself. persist: one CTA per SM walks the call's (tile, column block)
// items, the epilogue from registers; else one CTA per item.
int LaunchWgmmaTmaGemm(const GemmArgs& a, bool gate_up, bool one_mul, int bn, int max_tiles, bool persist,
                       cudaStream_t stream);
void LaunchDecodeGemm(const GemmArgs& a, bool gate_up, bool rows16, bool one_mul, int max_tiles,
                      cudaStream_t stream);
// The K-streamed TMA decode kernel (moe_cuda_decode_kst.cu; tiles of 8, 16, 24 or 32 token rows,
// slices of 2 or 4 chunks, 0 = the most that keeps three stages): 0, or -1 when two stages do not
// fit, the tile size is not one of those, or the driver has no tensor-map encoder, or the CUresult
// of a failed encode (nothing launched in any of these cases).
int LaunchDecodeKst(const GemmArgs& a, bool gate_up, bool one_mul, int slice_chunks, int tile_rows, int max_tiles,
                    cudaStream_t stream);
// The kst kernel's slice chunks under Variant::decode_pin (0: its own choice, 2, 4), or -1 when
// another decode kernel is pinned.
int KstSlice();
// Whether the 8-row kst configuration in force is the default (Variant::decode_pin and kst_cfg
// unset).
bool KstDefault();
// The combine's operands besides the per-slot rows y: out[t][:] = the sum of y over token t's
// held slots (LaunchCombine, or the paired launch at its end).
struct CombineArgs {
  const int32_t* ids;    // [tokens][top_k] expert ids
  const int32_t* local;  // [num_experts] held index or -1
  int num_experts, tokens, top_k;
  float* out;            // [tokens][h]
};
// A layer's gate_up and down GEMMs at 8-row kst tiles in one launch (moe_cuda_decode_kst_pair.cu),
// g and d as for LaunchGemm, done a zeroed [3 + max_tiles] kept for this stream (the kernel leaves
// it zeroed): 0, or -1 where it does not apply (Variant::kst_pair 0, at most 4 token-slots, a
// pinned decode kernel, two stages do not fit, the grid cannot be resident at once, no
// tensor-map encoder), or the CUresult of a failed encode; nothing launched unless 0.
// *combined: whether a launch was made that also writes c.out from d.y (the combine folded in,
// unless Variant::pair_combine is off); if not, the caller launches the combine.
int LaunchDecodeKstPair(const GemmArgs& g, const GemmArgs& d, bool one_mul, int max_tiles, const CombineArgs& c,
                        int32_t* done, bool* combined, cudaStream_t stream);
// Paired launches made so far in this process (the GPU check asserts the pair ran where asked).
int64_t KstPairLaunches();
// One row of a probe's table: "| name | min | median | max |" of v (not empty), two decimals.
std::string PhaseRow(const char* name, std::vector<double> v);
// Test seam: 1 pairs, 2 pairs through a queue, 0 does not, -1 (the start) follows
// Variant::kst_pair. The plan does not follow it: the GPU check's unpaired rerun takes the same
// tile heights.
void SetKstPair(int v);
// The fused one-launch layer for at most kTinyPairs token-slots (moe_cuda_fused.cu): g and d the
// two GEMMs' arguments as for LaunchGemm (their tile lists unused), host_route the batch's route
// made on the host from its ids (MakeTinyRoute; null: the kernel routes), out [tokens][hidden], sync
// one zeroed word kept for this stream (the grid barrier's count: GridBarrier leaves it at a
// multiple of the grid size). Returns whether it was launched; false when it does not fit this
// device (one CTA per SM), Variant::fused is off, or the launch was refused (the error cleared; a
// sticky one exits): the caller then runs the unfused kernels.
bool LaunchFusedDecode(const GemmArgs& g, const GemmArgs& d, const SelfRoute& sr, const TinyRoute* host_route,
                       float* out, uint32_t* sync, int tokens, bool one_mul, cudaStream_t stream);
// Fused layers launched so far in this process (the GPU check asserts the fused path ran where
// it should: it falls back silently otherwise).
uint64_t FusedLaunches();
// With Variant::fused_probe 7 (stamps): when each phase of the last fused call ended, over the
// grid (a markdown table; benchmarks).
std::string FusedStampsReport();
void LaunchCombine(const float* y, int h, const CombineArgs& c, cudaStream_t stream);
// The bf16 wire's conversions on the device, n elements: bf16 -> f32 (exact), and f32 -> bf16
// with the host's rounding (core/bf16.h: nearest even, NaN kept quiet), so that RunBf16 gives
// the bytes that converting Run's output on the host would.
void LaunchBf16ToF32(const uint16_t* x, float* y, size_t n, cudaStream_t stream);
void LaunchF32ToBf16(const float* x, uint16_t* y, size_t n, cudaStream_t stream);

}  // namespace mxserve::kernels::cuda::internal
