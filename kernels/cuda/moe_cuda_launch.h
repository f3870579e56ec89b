// Launchers of the CUDA MoE kernels (moe_cuda_kernels.cu), private to kernels/cuda.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace mxserve::kernels::cuda::internal {

struct GemmArgs;
struct SelfRoute;
struct TinyRoute;

// Programmatic dependent launch is used between the kernels of one call unless
// MXSERVE_CUDA_MOE_PDL=0 (benchmarks compare the two).
bool PdlEnabled();
// The fused kernel's weight copies go under an L2 evict_first policy unless
// MXSERVE_CUDA_MOE_EVICT_FIRST=off (benchmarks).
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
// process: the worker's): its SMs (at least 1), the most shared memory a block may opt in to, and
// its peak memory bandwidth in GB/s (memory clock x 2 x bus width; 0 when the driver does not say).
struct DeviceLimits {
  int sms = 1, smem_optin = 0;
  double peak_gbps = 0;
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
// The kernel configurations (LaunchGemm's `path`), in kPaths' order: decode with 8- or 16-row
// tiles, mid (32, K-streamed), prefill (64, mma.sync), decode24 (24, K-streamed), the wgmma kernel with register-A weights
// (moe_cuda_wgmma.cu) at 128 ... 192 token rows and (its TMA-fed form only, moe_cuda_wgmma_tma.cu)
// at the decode heights 8, 16 and 24, and with the weights through shared memory
// (moe_cuda_wgmma_ss.cu). The wgmma paths (>= kPathWgmma) read the gate_up operand in plain K
// order (RoutingArgs::plain_k).
enum Path : int {
  kPathDecode, kPathDecode16, kPathMid, kPathPrefill, kPathDecode24,
  kPathWgmma, kPathWgmma64, kPathWgmma256, kPathWgmma48, kPathWgmma32, kPathWgmma40, kPathWgmma96, kPathWgmma192,
  kPathWgmma8, kPathWgmma16, kPathWgmma24,
  kPathSs, kPathSs192, kPathSs64, kNumPaths
};
// Each path's MXSERVE_CUDA_MOE_PATH name (benchmarks pin one) and token rows per routing tile.
struct PathInfo {
  const char* name;
  int bm;
};
inline constexpr PathInfo kPaths[kNumPaths] = {
    {"decode", 8},    {"decode16", 16},   {"mid", 32},        {"prefill", 64},   {"decode24", 24},  {"wgmma", 128},
    {"wgmma64", 64},  {"wgmma256", 256},  {"wgmma48", 48},    {"wgmma32", 32},   {"wgmma40", 40},
    {"wgmma96", 96},  {"wgmma192", 192},  {"wgmma8", 8},      {"wgmma16", 16},   {"wgmma24", 24},
    {"wgmmass", 128}, {"wgmmass192", 192}, {"wgmmass64", 64}};
inline int PathBm(int path) { return kPaths[path].bm; }
// The path named `name`, or -1 (constexpr: kAuto's candidates are looked up at compile time).
constexpr int PathNamed(std::string_view name) {
  for (int p = 0; p < kNumPaths; ++p)
    if (name == kPaths[p].name) return p;
  return -1;
}
// A path spec: one path, or two of kAuto's of one kernel family, the call's tiles cut in two
// heights (moe_cuda_tile_choice.h: SplitTiles), named "<big>+<small>". -1: none.
constexpr int MixSpec(int big, int small) { return big | ((small + 1) << 8); }
constexpr int SpecBig(int spec) { return spec & 0xFF; }
constexpr int SpecSmall(int spec) { return (spec >> 8) - 1; }
// The spec named `name` (a path, or two joined by '+', which must be kAuto's and of one
// family, the first taller), or -1.
int SpecNamed(std::string_view name);
std::string SpecName(int spec);
// The spec kAuto is pinned to (-1: none): MXSERVE_CUDA_MOE_PATH=<a spec name>, read once, or the
// last SetForcedPath (benchmarks time several paths in one process; -1 unpins).
// MXSERVE_CUDA_MOE_MIX=off keeps kAuto to one height (benchmarks).
int ForcedPath();
void SetForcedPath(int spec);
// The spec kAuto last chose in this process (-1: none yet; the GPU check prints it).
int LastAutoPath();
// Returns 0, or (wgmma paths) -1 when the driver has no tensor-map encoder / the CUresult of a
// failed encode: then nothing was launched and the call must fail (the tiles fit no other kernel).
// one_mul: the layer's scale bytes are all <= 128 (the folded-scale fast path).
int LaunchGemm(const GemmArgs& a, bool gate_up, int path, bool one_mul, int max_tiles, cudaStream_t stream);
// The wgmma prefill GEMM (moe_cuda_wgmma.cu; paths kPathWgmma .. kPathWgmma192, bn = their tile
// height): non-zero is -1 (no tensor-map encoder in this driver) or the failed encode's
// CUresult, and nothing was enqueued.
bool WgmmaAvailable();
int LaunchWgmmaGemm(const GemmArgs& a, bool gate_up, bool one_mul, int bn, int max_tiles, cudaStream_t stream);
// The same GEMM with the weights streamed by TMA into shared-memory stages
// (moe_cuda_wgmma_tma.cu): what LaunchWgmmaGemm runs unless MXSERVE_CUDA_MOE_WGMMA_CFG pins one of
// moe_cuda_wgmma.cu's configurations. Returns as LaunchWgmmaGemm (-1 for a bn that is not a wgmma
// tile height). persist: one CTA per SM walks the call's (tile, column block) items, the epilogue
// from registers (MXSERVE_CUDA_MOE_WGMMA_CFG=persist); else one CTA per item.
int LaunchWgmmaTmaGemm(const GemmArgs& a, bool gate_up, bool one_mul, int bn, int max_tiles, bool persist,
                       cudaStream_t stream);
// The weights-through-shared-memory variant (moe_cuda_wgmma_ss.cu; paths kPathSs .. kPathSs64,
// tiles of `tokens` = 128, 192 or 64 token rows; not in kAuto): returns as LaunchWgmmaGemm.
int LaunchWgmmaSsGemm(const GemmArgs& a, bool gate_up, bool one_mul, int tokens, int max_tiles, cudaStream_t stream);
void LaunchDecodeGemm(const GemmArgs& a, bool gate_up, bool rows16, bool one_mul, int max_tiles,
                      cudaStream_t stream);
// The K-streamed TMA decode kernel (moe_cuda_decode_kst.cu; tiles of 8, 16, 24 or 32 token rows,
// slices of 2 or 4 chunks, 0 = the most that keeps three stages): 0, or -1 when two stages do not
// fit, the tile size is not one of those, or the driver has no tensor-map encoder, or the CUresult
// of a failed encode (nothing launched in any of these cases).
int LaunchDecodeKst(const GemmArgs& a, bool gate_up, bool one_mul, int slice_chunks, int tile_rows, int max_tiles,
                    cudaStream_t stream);
// MXSERVE_CUDA_MOE_DECODE (benchmarks): 0 unset (the defaults), 2 bulk, 3 ring, 5 kst (2-chunk
// slices), 6 kst4 (4-chunk slices, one m16 tile per warp).
int DecodePin();
// The kst kernel's slice chunks under that pin (0: its own choice, 2, 4), or -1 when another
// decode kernel is pinned.
int KstSlice();
// Whether the 8-row kst configuration in force is the default (nothing pinned by
// MXSERVE_CUDA_MOE_DECODE or MXSERVE_CUDA_MOE_KST_CFG).
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
// it zeroed): 0, or -1 where it does not apply (MXSERVE_CUDA_MOE_KST_PAIR=off, at most 4
// token-slots, a pinned decode kernel, two stages do not fit, the grid cannot be resident at once,
// no tensor-map encoder), or the CUresult of a failed encode; nothing launched unless 0.
// *combined: whether a launch was made that also writes c.out from d.y (the combine folded in,
// unless MXSERVE_CUDA_MOE_PAIR_COMBINE=off); if not, the caller launches the combine.
int LaunchDecodeKstPair(const GemmArgs& g, const GemmArgs& d, bool one_mul, int max_tiles, const CombineArgs& c,
                        int32_t* done, bool* combined, cudaStream_t stream);
// Paired launches made so far in this process (the GPU check asserts the pair ran where asked).
int64_t KstPairLaunches();
// One row of a probe's table: "| name | min | median | max |" of v (not empty), two decimals.
std::string PhaseRow(const char* name, std::vector<double> v);
// MXSERVE_CUDA_MOE_PAIR_PROBE=stamps: when each phase of the last paired launch (queue form)
// ended per CTA, over the grid, and how many items the CTAs took (a table for the bench).
std::string PairStampsReport();
// Test seam: 1 pairs, 2 pairs through a queue, 0 does not, -1 (the start) follows
// MXSERVE_CUDA_MOE_KST_PAIR.
void SetKstPair(int v);
// Whether kAuto costs decode alone as the paired launch (AutoTile::paired_ps): on a card where
// that cost holds (PairedCostHolds: below an H200's memory bandwidth; MXSERVE_CUDA_MOE_PAIRED_COST
// =on|off overrides), unless MXSERVE_CUDA_MOE_KST_PAIR=off or a decode kernel is pinned. Not
// SetKstPair: the GPU check's unpaired rerun must take the same configuration.
bool KstPairCosted();
// The fused one-launch layer for at most kTinyPairs token-slots (moe_cuda_fused.cu): g and d the
// two GEMMs' arguments as for LaunchGemm (their tile lists unused), host_route the batch's route
// made on the host from its ids (MakeTinyRoute; null: the kernel routes), out [tokens][hidden], sync
// one zeroed word kept for this stream (the grid barrier's count: GridBarrier leaves it at a
// multiple of the grid size). Returns whether it was launched; false when
// it does not fit this device (one CTA per SM), MXSERVE_CUDA_MOE_FUSED=off, or the launch was
// refused (the error cleared; a sticky one exits): the caller then runs the unfused kernels.
bool LaunchFusedDecode(const GemmArgs& g, const GemmArgs& d, const SelfRoute& sr, const TinyRoute* host_route,
                       float* out, uint32_t* sync, int tokens, bool one_mul, cudaStream_t stream);
// Fused layers launched so far in this process (the GPU check asserts the fused path ran where
// it should: it falls back silently otherwise).
uint64_t FusedLaunches();
// MXSERVE_CUDA_MOE_FUSED_PROBE=stamps: when each phase of the last fused call ended, over the
// grid (a markdown table; benchmarks).
std::string FusedStampsReport();
void LaunchCombine(const float* y, int h, const CombineArgs& c, cudaStream_t stream);
// The bf16 wire's conversions on the device, n elements: bf16 -> f32 (exact), and f32 -> bf16
// with the host's rounding (core/bf16.h: nearest even, NaN kept quiet), so that RunBf16 gives
// the bytes that converting Run's output on the host would.
void LaunchBf16ToF32(const uint16_t* x, float* y, size_t n, cudaStream_t stream);
void LaunchF32ToBf16(const float* x, uint16_t* y, size_t n, cudaStream_t stream);

}  // namespace mxserve::kernels::cuda::internal
