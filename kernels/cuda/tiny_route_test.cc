// MakeTinyRoute (moe_cuda_tiny_route.h) against the obvious construction: slots sorted by held
// expert (stable), skipped slots dropped, one tile per run of equal experts. Random batches with
// skipped slots, experts out of range, experts not held, and repeats.
#include <algorithm>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cuda/moe_cuda_tiny_route.h"

namespace mxserve::kernels::cuda::internal {
namespace {

TEST(TinyRoute, MatchesASortOfTheSlots) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 2000; ++trial) {
    const int E = 1 + rng() % 9, pairs = rng() % (kTinyPairs + 1);
    std::vector<int32_t> local(E), ids(kTinyPairs, 12345);  // past `pairs`: never read as slots
    int held = 0;
    for (int32_t& l : local) l = rng() % 3 == 0 ? -1 : held++;
    for (int i = 0; i < pairs; ++i) ids[i] = int(rng() % (E + 2)) - 1;  // -1 .. E (E: out of range)
    const TinyRoute r = MakeTinyRoute(ids.data(), pairs, local.data(), E);

    std::vector<std::pair<int, int>> want;  // (held expert, slot), stable by slot
    for (int i = 0; i < pairs; ++i) {
      if (ids[i] >= 0 && ids[i] < E && local[ids[i]] >= 0) want.push_back({local[ids[i]], i});
    }
    std::stable_sort(want.begin(), want.end(), [](auto a, auto b) { return a.first < b.first; });
    int tiles = 0;
    for (size_t j = 0; j < want.size(); ++j) {
      ASSERT_EQ(r.sorted[j], want[j].second) << "trial " << trial << " row " << j;
      if (j == 0 || want[j].first != want[j - 1].first) {
        ASSERT_LT(tiles, r.ntiles);
        EXPECT_EQ(r.e[tiles], want[j].first);
        EXPECT_EQ(r.row0[tiles], int(j));
        ++tiles;
      }
      EXPECT_EQ(r.e[tiles - 1], want[j].first);
      EXPECT_LT(int(j), r.row0[tiles - 1] + r.rows[tiles - 1]);
    }
    ASSERT_EQ(r.ntiles, tiles) << "trial " << trial;
  }
}

// The fused kernel's split of a layer over its grid: every gate_up unit and every down group in
// some CTA's range (ranges chain), and each CTA's weight bytes within one unit of an even share
// wherever its down groups alone do not exceed that share.
TEST(FusedCtaRange, CoversEveryUnitAndBalancesBytes) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 3000; ++trial) {
    FusedWork w;
    w.ca = 64 + 16 * (rng() % 2000);
    w.cd = 64 + 16 * (rng() % 2000);
    w.ng_gu = 1 + rng() % 1000;
    w.ngd = 1 + rng() % 1000;
    w.ntiles = rng() % (kTinyPairs + 1);
    const int G = 1 + rng() % 200;
    const int64_t na = int64_t(w.ntiles) * w.ng_gu;
    const double share = double(na * w.ca + int64_t(w.ngd) * w.ntiles * w.cd) / G;
    int next_a = 0, next_r = 0;
    for (int b = 0; b < G; ++b) {
      const FusedRange r = FusedCtaRange(w, b, G);
      ASSERT_LE(r.a0, next_a) << "gate_up units skipped before CTA " << b << " (trial " << trial << ")";
      ASSERT_LE(r.a0, r.a1);
      next_a = std::max(next_a, r.a1);
      ASSERT_EQ(r.r0, next_r) << "trial " << trial;
      ASSERT_LE(r.r0, r.r1);
      next_r = r.r1;
      const double down = double(r.r1 - r.r0) * w.ntiles * w.cd;
      if (down + w.ca < share && r.a1 < na && r.a0 > 0) {
        const double bytes = double(r.a1 - r.a0) * w.ca + down;
        EXPECT_NEAR(bytes, share, 2.0 * w.ca + w.ntiles * w.cd) << "CTA " << b << " trial " << trial;
      }
    }
    EXPECT_EQ(next_a, na) << "trial " << trial;
    EXPECT_EQ(next_r, w.ngd) << "trial " << trial;
  }
}

TEST(ParseFusedPin, BuiltConfigurationsOffAndRejects) {
  const FusedPinned def = ParseFusedPin("");
  EXPECT_TRUE(def.valid);
  EXPECT_FALSE(def.off);
  EXPECT_EQ(def.parts, 4);
  EXPECT_EQ(def.depth, 1);
  EXPECT_EQ(def.warps, 16);
  EXPECT_TRUE(ParseFusedPin("off").off);
  EXPECT_TRUE(ParseFusedPin("0").off);
  const FusedPinned p = ParseFusedPin("6x2w32");
  EXPECT_TRUE(p.valid);
  EXPECT_EQ(p.parts, 6);
  EXPECT_EQ(p.depth, 2);
  EXPECT_EQ(p.warps, 32);
  for (const char* ok : {"3x1", "4x2", "4x1w16", "4x1w24", "6x1w24", "6x1w32"}) {
    EXPECT_TRUE(ParseFusedPin(ok).valid) << ok;
    EXPECT_FALSE(ParseFusedPin(ok).off) << ok;
  }
  for (const char* bad : {"6x1", "2x1", "4x3", "4x0", "4x1w20", "4x1w", "4x1junk", "4x1w24x", "x1", "4", "on"}) {
    EXPECT_FALSE(ParseFusedPin(bad).valid) << bad;
  }
}

}  // namespace
}  // namespace mxserve::kernels::cuda::internal
