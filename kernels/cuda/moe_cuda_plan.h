// Which kernels run one MoeForwardCuda call: PlanMoeForward turns the batch's shape and the card
// into a typed plan (kernels, tile heights, and why). Plain C++ (no CUDA): tested on the CPU
// (plan_test.cc). README.md here shows the plan as a table.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace mxserve::kernels::cuda::internal {

// The kernel configurations a plan names (LaunchGemm's `path`): the K-streamed decode kernel at
// 8, 16, 24 rows (decode, decode16, decode24) and 32 rows (mid: kernels/cuda/lab builds it; else
// the mma.sync GEMM at 32-row tiles runs it), the mma.sync GEMM at 64 rows
// (prefill: the fallback without tensor maps), the TMA-fed register-A wgmma kernel at 8 ... 256
// rows, and the weights-through-shared-memory wgmma kernel (ss paths: built by kernels/cuda/lab
// only). The wgmma paths (>= kPathWgmma) read the gate_up operand in plain K order.
enum Path : int {
  kPathDecode, kPathDecode16, kPathMid, kPathPrefill, kPathDecode24,
  kPathWgmma, kPathWgmma64, kPathWgmma256, kPathWgmma48, kPathWgmma32, kPathWgmma40, kPathWgmma96, kPathWgmma192,
  kPathWgmma8, kPathWgmma16, kPathWgmma24,
  kPathSs, kPathSs192, kPathSs64, kNumPaths
};
// Each path's name (the lab's `path=` pins one) and token rows per routing tile.
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
// The largest remainder a two-height spec's small tiles take (MixRmax of their kAutoTiles).
int MixRmaxOfPaths(int big, int small);

// What the plan reads of the card.
struct CardInfo {
  double peak_gbps = 0;      // peak memory bandwidth (memory clock x 2 x bus width; 0: unknown)
  bool tensor_maps = true;   // the driver encodes tensor maps (TMA): the kst and wgmma kernels run
  // Compute capability, major x 10 + minor. Below 90 no sm_90a kernel runs (wgmma, TMA, bulk
  // copies, the kst, paired and fused kernels): the plan takes the portable ones.
  int cc = 90;
};

// The batch as the plan sees it.
struct MoeShape {
  int64_t pairs = 0;          // token-slots (tokens x top_k)
  int held = 1;               // experts held by the layer (at least 1)
  double expert_bytes = 0;    // MXFP4 weight bytes of one expert
  // Slots routed to each held expert ([held]), or null: the slots are expected under uniform
  // routing (Poisson with the mean). The worker's runner has the ids on the host and passes them.
  const int32_t* counts = nullptr;
};

// Choices a benchmark may change (kernels/cuda/lab); the defaults are production's.
struct PlanOptions {
  bool mix = true;           // two tile heights may be taken
  bool alone_wgmma = true;   // 16 and 24 rows alone run the wgmma kernel (AutoTile::alone_path)
  int paired_cost = 0;       // 0: weighed where PairedCostHolds(card), 1: always, 2: never
  bool pairing = true;       // the paired launch exists (kst_pair not off, no decode kernel pinned)
};

// The kernels of one call, in order: the fused one-launch layer (where it fits the device, else
// what follows), or routing, gate_up and down at `big` rows (both in one launch where `paired`),
// those at `small` rows beside them on the side stream, and the combine.
struct CudaMoePlan {
  int big = kPathDecode;   // Path of the first (or only) tile height
  int small = -1;          // Path of the second tile height; -1: one height
  bool fused = false;      // the whole layer in one launch (moe_cuda_fused.cu)
  bool paired = false;     // gate_up and down in one launch (moe_cuda_decode_kst_pair.cu)
  const char* why = "";    // one line: what decided it
  int spec() const { return small < 0 ? big : MixSpec(big, small); }
};

// kAuto's plan: the cheapest tile height or two by the cost model (moe_cuda_tile_choice.h), the
// fused layer at <= kTinyPairs token-slots, the paired launch for 8-row tiles alone, and the
// mma.sync fallback where the card has no tensor maps. On a card below compute capability 9.0
// only portable kernels: decode heights (the register ring, or mma.sync at 24 rows), else the
// mma.sync GEMM; never fused or paired.
CudaMoePlan PlanMoeForward(const MoeShape& shape, const CardInfo& card, const PlanOptions& opt = {});
// The plan of a pinned spec (a CudaMoePath the caller names, or a lab pin): fused where may_fuse
// (a kAuto call pinned by the lab) and the spec is 8-row decode tiles at <= kTinyPairs
// token-slots; paired and the fallback as above.
CudaMoePlan PlanForSpec(int spec, int64_t pairs, const CardInfo& card, const PlanOptions& opt, bool may_fuse);

}  // namespace mxserve::kernels::cuda::internal
