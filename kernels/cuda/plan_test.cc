// PlanMoeForward against the pieces it is made of (moe_cuda_tile_choice.h) and the rules the
// README's table states.
#include "kernels/cuda/moe_cuda_plan.h"

#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/moe_cuda_tile_choice.h"

namespace mxserve::kernels::cuda::internal {
namespace {

constexpr double kH100 = 3352, kH200 = 4097;           // peak GB/s by memory clock and bus
constexpr double kExpertBytes = 2880.0 * 2880 * 3 * 17 / 32;  // about gpt-oss-120b's

MoeShape Uniform(int64_t pairs, int held) {
  MoeShape s;
  s.pairs = pairs;
  s.held = held;
  s.expert_bytes = kExpertBytes;
  return s;
}

TEST(PlanTest, FewSlotsRunTheFusedLayer) {
  for (int64_t pairs = 1; pairs <= 4; ++pairs) {
    const CudaMoePlan p = PlanMoeForward(Uniform(pairs, 128), CardInfo{kH100, true});
    EXPECT_TRUE(p.fused) << pairs;
    EXPECT_FALSE(p.paired);
    EXPECT_EQ(p.big, kPathDecode);
    EXPECT_EQ(p.small, -1);
  }
  EXPECT_FALSE(PlanMoeForward(Uniform(5, 128), CardInfo{kH100, true}).fused);
}

TEST(PlanTest, EightRowTilesAlonePair) {
  const CudaMoePlan p = PlanMoeForward(Uniform(64, 128), CardInfo{kH100, true});
  EXPECT_EQ(p.big, kPathDecode);
  EXPECT_TRUE(p.paired);
  PlanOptions off;
  off.pairing = false;
  EXPECT_FALSE(PlanMoeForward(Uniform(64, 128), CardInfo{kH100, true}, off).paired);
}

TEST(PlanTest, LargeBatchesTakeWgmmaTilesAndFallBackWithoutTensorMaps) {
  const CudaMoePlan p = PlanMoeForward(Uniform(16384 * 4, 128), CardInfo{kH100, true});
  EXPECT_GE(p.big, kPathWgmma);
  EXPECT_FALSE(p.fused);
  EXPECT_FALSE(p.paired);
  const CudaMoePlan q = PlanMoeForward(Uniform(16384 * 4, 128), CardInfo{kH100, false});
  EXPECT_EQ(q.big, kPathPrefill);
  EXPECT_EQ(q.small, -1);
}

// The plan is the cost model's choice: the same tiles as ChooseAutoMix / ChooseAutoMixForCounts
// (with 16 and 24 rows alone run as wgmma16 / wgmma24), on random shapes, with and without counts.
TEST(PlanTest, MatchesTheCostModel) {
  std::mt19937 rng(49);
  for (int iter = 0; iter < 300; ++iter) {
    const int held = 8 + int(rng() % 377);
    const int64_t pairs = 5 + int64_t(rng() % 200000);
    const double peak = (rng() & 1) ? kH100 : kH200;
    std::vector<int32_t> counts(held, 0);
    for (int64_t i = 0; i < pairs; ++i) ++counts[rng() % held];
    const bool with_counts = rng() & 1;
    MoeShape s = Uniform(pairs, held);
    if (with_counts) s.counts = counts.data();
    const CudaMoePlan p = PlanMoeForward(s, CardInfo{peak, true});
    const bool paired = PairedCostHolds(peak);
    AutoChoice c;
    if (with_counts) {
      c = ChooseAutoMixForCounts(counts.data(), held, kExpertBytes, ~0u, true, paired);
    } else {
      const int64_t over = std::min<int64_t>(held, pairs);
      c = ChooseAutoMix(double(pairs) / double(over), double(over) * kExpertBytes, ~0u, true, paired);
    }
    int big = PathNamed(kAutoTiles[c.big].path), small = c.small < 0 ? -1 : PathNamed(kAutoTiles[c.small].path);
    if (small < 0 && kAutoTiles[c.big].alone_path) big = PathNamed(kAutoTiles[c.big].alone_path);
    EXPECT_EQ(p.big, big) << pairs << " slots over " << held;
    EXPECT_EQ(p.small, small) << pairs << " slots over " << held;
    EXPECT_EQ(p.paired, big == kPathDecode && small < 0);
    EXPECT_FALSE(p.fused);
    EXPECT_STRNE(p.why, "");
  }
}

// Below compute capability 9.0 (an A100: sm_80) no plan names an sm_90a kernel: no wgmma
// height, no fused or paired launch, at any batch, with or without counts, pinned or not.
TEST(PlanTest, CardsBelowSm90RunOnlyPortableKernels) {
  std::mt19937 rng(80);
  CardInfo a100;
  a100.peak_gbps = 2039;
  a100.cc = 80;
  auto portable = [](const CudaMoePlan& p) {
    return p.big < kPathWgmma && p.small < kPathWgmma && !p.fused && !p.paired;
  };
  for (int64_t pairs = 1; pairs <= 64; ++pairs) EXPECT_TRUE(portable(PlanMoeForward(Uniform(pairs, 128), a100))) << pairs;
  for (int iter = 0; iter < 300; ++iter) {
    const int held = 1 + int(rng() % 384);
    const int64_t pairs = 1 + int64_t(rng() % 200000);
    std::vector<int32_t> counts(held, 0);
    for (int64_t i = 0; i < pairs; ++i) ++counts[rng() % held];
    MoeShape s = Uniform(pairs, held);
    if (rng() & 1) s.counts = counts.data();
    const CudaMoePlan p = PlanMoeForward(s, a100);
    EXPECT_TRUE(portable(p)) << pairs << " slots over " << held << ": " << SpecName(p.spec());
    // The same shape on an H100 takes the wgmma heights where the A100 takes the mma.sync GEMM.
    const CudaMoePlan h = PlanMoeForward(s, CardInfo{kH100, true});
    EXPECT_EQ(p.big, h.big >= kPathWgmma ? kPathPrefill : h.big) << pairs << " slots over " << held;
  }
  for (int spec = 0; spec < kNumPaths; ++spec) {
    EXPECT_TRUE(portable(PlanForSpec(spec, 2, a100, PlanOptions{}, true))) << kPaths[spec].name;
    EXPECT_TRUE(portable(PlanForSpec(spec, 100, a100, PlanOptions{}, true))) << kPaths[spec].name;
  }
}

TEST(PlanTest, PinnedSpecs) {
  const CardInfo card{kH100, true};
  const int mix = SpecNamed("decode24+decode16");
  ASSERT_GE(mix, 0);
  const CudaMoePlan m = PlanForSpec(mix, 1000, card, PlanOptions{}, true);
  EXPECT_EQ(m.big, kPathDecode24);
  EXPECT_EQ(m.small, kPathDecode16);
  EXPECT_EQ(m.spec(), mix);
  EXPECT_EQ(SpecName(mix), "decode24+decode16");
  EXPECT_TRUE(PlanForSpec(kPathDecode, 2, card, PlanOptions{}, true).fused);
  EXPECT_FALSE(PlanForSpec(kPathDecode, 2, card, PlanOptions{}, false).fused);
  EXPECT_TRUE(PlanForSpec(kPathDecode, 100, card, PlanOptions{}, false).paired);
  EXPECT_EQ(PlanForSpec(kPathWgmma64, 100, CardInfo{kH100, false}, PlanOptions{}, false).big, kPathPrefill);
  EXPECT_EQ(SpecNamed("decode16+decode24"), -1);  // the taller first
  EXPECT_EQ(SpecNamed("nonsense"), -1);
}

}  // namespace
}  // namespace mxserve::kernels::cuda::internal
