#include "kernels/cuda/moe_cuda_plan.h"

#include <algorithm>
#include <array>
#include <vector>

#include "kernels/cuda/moe_cuda_tile_choice.h"
#include "kernels/cuda/moe_cuda_tiny_route.h"  // kTinyPairs

namespace mxserve::kernels::cuda::internal {
namespace {

// kAutoTiles' paths (moe_cuda_tile_choice.h names them).
constexpr std::array<int, kNumAutoTiles> kAutoPathIds = [] {
  std::array<int, kNumAutoTiles> ids{};
  for (int i = 0; i < kNumAutoTiles; ++i) ids[i] = PathNamed(kAutoTiles[i].path);
  return ids;
}();
// Every configuration kAuto may choose is a path with the tile height the model assumed.
constexpr bool AutoTilesArePaths() {
  for (int i = 0; i < kNumAutoTiles; ++i)
    if (kAutoPathIds[i] < 0 || kPaths[kAutoPathIds[i]].bm != kAutoTiles[i].rows) return false;
  return true;
}
static_assert(AutoTilesArePaths(), "kAutoTiles names a path not in kPaths, or with other tile rows");
// Their alone_paths (-1: none), each a path with the same tile rows.
constexpr std::array<int, kNumAutoTiles> kAutoAlonePathIds = [] {
  std::array<int, kNumAutoTiles> ids{};
  for (int i = 0; i < kNumAutoTiles; ++i) ids[i] = kAutoTiles[i].alone_path ? PathNamed(kAutoTiles[i].alone_path) : -1;
  return ids;
}();
constexpr bool AlonePathsArePaths() {
  for (int i = 0; i < kNumAutoTiles; ++i) {
    if (!kAutoTiles[i].alone_path) continue;
    if (kAutoAlonePathIds[i] < 0 || kPaths[kAutoAlonePathIds[i]].bm != kAutoTiles[i].rows) return false;
  }
  return true;
}
static_assert(AlonePathsArePaths(), "an alone_path of kAutoTiles is not in kPaths, or has other tile rows");

// kAutoTiles' index of path p, or -1.
int AutoIndex(int p) {
  for (int i = 0; i < kNumAutoTiles; ++i)
    if (kAutoPathIds[i] == p) return i;
  return -1;
}

// What every plan does after its tile heights are chosen: the mma.sync fallback where the wgmma
// kernels cannot run, then the fused and paired launches where they apply (sm_90a kernels: not
// below compute capability 9.0, where the decode heights run the register ring).
CudaMoePlan Finish(CudaMoePlan plan, int64_t pairs, const CardInfo& card, bool may_fuse, bool pairing) {
  const bool sm90 = card.cc >= 90;
  if (plan.big >= kPathWgmma && (!card.tensor_maps || !sm90)) {
    plan.big = kPathPrefill;
    plan.small = -1;
    plan.why = sm90 ? "no tensor-map encoder in the driver: the mma.sync GEMM"
                    : "compute capability below 9.0: the mma.sync GEMM";
  }
  if (sm90 && may_fuse && plan.big == kPathDecode && plan.small < 0 && pairs <= kTinyPairs) {
    plan.fused = true;
    plan.why = "at most 4 token-slots: the whole layer in one launch";
  }
  plan.paired = sm90 && pairing && plan.big == kPathDecode && plan.small < 0 && pairs > kTinyPairs;
  return plan;
}

}  // namespace

int SpecNamed(std::string_view name) {
  const size_t plus = name.find('+');
  if (plus == std::string_view::npos) return PathNamed(name);
  const int big = PathNamed(name.substr(0, plus)), small = PathNamed(name.substr(plus + 1));
  const int bi = AutoIndex(big), si = AutoIndex(small);
  if (bi < 0 || si < 0 || kAutoTiles[si].rows >= kAutoTiles[bi].rows ||
      kAutoTiles[si].family != kAutoTiles[bi].family || MixRmax(bi, si) == 0) {
    return -1;
  }
  return MixSpec(big, small);
}

std::string SpecName(int spec) {
  if (spec < 0) return "?";
  const int small = SpecSmall(spec);
  return std::string(kPaths[SpecBig(spec)].name) + (small < 0 ? "" : std::string("+") + kPaths[small].name);
}

int MixRmaxOfPaths(int big, int small) { return MixRmax(AutoIndex(big), AutoIndex(small)); }

CudaMoePlan PlanMoeForward(const MoeShape& shape, const CardInfo& card, const PlanOptions& opt) {
  const int nh = std::max(1, shape.held);
  const bool paired = opt.pairing && (opt.paired_cost == 0 ? PairedCostHolds(card.peak_gbps) : opt.paired_cost == 1);
  AutoChoice c;
  const char* why = "";
  if (shape.counts != nullptr) {
    c = opt.mix ? ChooseAutoMixForCounts(shape.counts, nh, shape.expert_bytes, ~0u, opt.alone_wgmma, paired)
                : AutoChoice{ChooseAutoTileForCounts(shape.counts, nh), -1, 0};
    why = "least modelled cost for the experts' slot counts";
  }
  if (c.big < 0) {  // no counts, or no held slot (then any will do)
    const int64_t over = std::max<int64_t>(1, std::min<int64_t>(nh, shape.pairs));  // the experts the mean is over
    const double mean = double(shape.pairs) / double(over);
    c = opt.mix ? ChooseAutoMix(mean, double(over) * shape.expert_bytes, ~0u, opt.alone_wgmma, paired)
                : AutoChoice{ChooseAutoTile(mean), -1, 0};
    why = "least modelled cost for the mean slots per expert (uniform routing)";
  }
  CudaMoePlan plan;
  plan.why = why;
  plan.big = kAutoPathIds[c.big];
  if (c.small >= 0) {
    plan.small = kAutoPathIds[c.small];
  } else if (opt.alone_wgmma && kAutoAlonePathIds[c.big] >= 0) {
    plan.big = kAutoAlonePathIds[c.big];  // 16 or 24 rows alone: the wgmma kernel at that height
  }
  return Finish(plan, shape.pairs, card, /*may_fuse=*/true, opt.pairing);
}

CudaMoePlan PlanForSpec(int spec, int64_t pairs, const CardInfo& card, const PlanOptions& opt, bool may_fuse) {
  CudaMoePlan plan;
  plan.big = SpecBig(spec);
  plan.small = SpecSmall(spec);
  plan.why = "pinned";
  return Finish(plan, pairs, card, may_fuse, opt.pairing);
}

}  // namespace mxserve::kernels::cuda::internal
