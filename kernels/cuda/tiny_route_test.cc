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

// A held range [lo, lo + n) (HeldIndex without the table) routes exactly as its table does, ids
// below, inside, past the range and out of [0, E) included.
TEST(TinyRoute, HeldRangeMatchesItsTable) {
  std::mt19937 rng(23);
  for (int trial = 0; trial < 2000; ++trial) {
    const int E = 1 + rng() % 12, lo = rng() % E, n = rng() % (E - lo + 1), pairs = rng() % (kTinyPairs + 1);
    std::vector<int32_t> local(E, -1), ids(kTinyPairs, 12345);
    for (int e = lo; e < lo + n; ++e) local[e] = e - lo;
    for (int i = 0; i < pairs; ++i) ids[i] = int(rng() % (E + 3)) - 2;  // -2 .. E
    const TinyRoute want = MakeTinyRoute(ids.data(), pairs, local.data(), E);
    const TinyRoute got = MakeTinyRoute(ids.data(), pairs, /*local=*/nullptr, E, lo, n);
    ASSERT_EQ(got.ntiles, want.ntiles) << "trial " << trial;
    for (int t = 0; t < want.ntiles; ++t) {
      EXPECT_EQ(got.e[t], want.e[t]);
      EXPECT_EQ(got.row0[t], want.row0[t]);
      EXPECT_EQ(got.rows[t], want.rows[t]);
    }
    const int rows = want.ntiles > 0 ? want.row0[want.ntiles - 1] + want.rows[want.ntiles - 1] : 0;
    for (int r = 0; r < rows; ++r) EXPECT_EQ(got.sorted[r], want.sorted[r]) << "trial " << trial;
    for (int e = -2; e <= E; ++e) {
      EXPECT_EQ(HeldIndex(e, nullptr, E, lo, n), e >= 0 && e < E ? local[e] : -1) << "id " << e;
    }
  }
}

// The fused kernel's split of a layer over its grid: every gate_up unit and every down group in
// some CTA's range (ranges chain), and each CTA's weight bytes within one unit of an even share
// wherever its down groups alone do not exceed that share.
// FusedAStart's arithmetic in 64 bits (the obvious twin of the kernel's 32-bit one).
int AStart64(const FusedWork& w, int b, int G) {
  const int64_t na = int64_t(w.ntiles) * w.ng_gu;
  const int64_t total = na * w.ca + int64_t(w.ngd) * w.ntiles * w.cd;
  const int64_t v = int64_t(b) * total / G - (int64_t(b) * w.ngd / G) * w.ntiles * w.cd;
  return v <= 0 ? 0 : v / w.ca < na ? int(v / w.ca) : int(na);
}

TEST(FusedCtaRange, CoversEveryUnitAndBalancesBytes) {
  std::mt19937 rng(5);
  int ran = 0;
  for (int trial = 0; trial < 6000; ++trial) {
    FusedWork w;
    // Units of 16 bytes; up to ~a 20 MB unit set per tile, and the real shapes' (gpt-oss: ca =
    // cd = 1532, ng 360 / 180; Kimi-K2-like: 3808 / 1088, 256 / 448).
    w.ca = 4 + rng() % (trial % 3 == 0 ? 4000 : 400);
    w.cd = 4 + rng() % (trial % 3 == 0 ? 4000 : 400);
    if (trial % 7 == 0) w.cd = 0;  // FusedWorkOf at down_pct 0: gate_up units split evenly
    w.ng_gu = 1 + rng() % 1000;
    w.ngd = 1 + rng() % 1000;
    w.ntiles = rng() % (kTinyPairs + 1);
    const int G = 1 + rng() % 200;
    if (!FusedFits32(w, G)) continue;
    ++ran;
    for (int b = 0; b <= G; ++b) ASSERT_EQ(FusedAStart(w, b, G), AStart64(w, b, G)) << "trial " << trial;
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
  EXPECT_GT(ran, 3000);
  // The plan refuses what the 32-bit arithmetic cannot hold.
  FusedWork big;
  big.ca = big.cd = 1 << 20;
  big.ng_gu = big.ngd = 1000;
  big.ntiles = kTinyPairs;
  EXPECT_FALSE(FusedFits32(big, 132));
  // FusedWorkOf: a unit's 16-byte units (weights and scales of 16 rows), the down ones weighed.
  GemmArgs g{}, d{};
  g.kp = d.kp = 2880;
  g.chunks = d.chunks = 23;
  g.n = 5760;
  d.n = 2880;
  const FusedWork full = FusedWorkOf(g, d, kTinyPairs, 100), half = FusedWorkOf(g, d, kTinyPairs, 50);
  EXPECT_EQ(full.ca, 2880u / 2 + 4 * 23);
  EXPECT_EQ(full.cd, 2880u / 4 + 2 * 23);  // 8 rows
  EXPECT_EQ(half.cd, full.cd / 2);
  EXPECT_EQ(FusedWorkOf(g, d, kTinyPairs, 0).cd, 0u);
  EXPECT_EQ(full.ng_gu, 360);
  EXPECT_EQ(full.ngd, 360);
  FusedWork oss;  // gpt-oss-120b, 4 tiles, 132 SMs
  oss.ca = 2880 / 2 + 4 * 23;
  oss.cd = 2880 / 4 + 2 * 23;
  oss.ng_gu = 360;
  oss.ngd = 360;
  oss.ntiles = kTinyPairs;
  EXPECT_TRUE(FusedFits32(oss, 132));
  // Its down work per CTA after the grid barrier: two or three 8-row groups, so at most 6 units
  // of 16 rows (two 16-row groups, 8 units, before the 8-row items).
  int most = 0;
  for (int b = 0; b < 132; ++b) {
    const FusedRange r = FusedCtaRange(oss, b, 132);
    EXPECT_GE(r.r1 - r.r0, 2);
    EXPECT_LE(r.r1 - r.r0, 3);
    most = std::max(most, FusedDownUnits(r.r1 - r.r0, kTinyPairs));
  }
  EXPECT_EQ(most, 6);
}

// A CTA's down units: items 2u and 2u + 1 of its (group, tile) items cover every item exactly
// once (the odd last one paired with itself, its copy's outputs dropped), in groups [r0, r1).
TEST(FusedDownItem, UnitsCoverEveryItemOnce) {
  for (int nt = 1; nt <= kTinyPairs; ++nt) {
    for (int groups = 0; groups <= 7; ++groups) {
      const int r0 = 5;
      std::vector<int> seen(groups * nt, 0);
      const int units = FusedDownUnits(groups, nt);
      EXPECT_EQ(units, (groups * nt + 1) / 2);
      for (int u = 0; u < units; ++u) {
        for (int h = 0; h < 2; ++h) {
          const int i = 2 * u + h;
          if (i >= groups * nt) {
            EXPECT_EQ(h, 1);  // only half B of the last unit is a copy
            continue;
          }
          int grp = -1, tile = -1;
          FusedDownItem(i, r0, nt, grp, tile);
          ASSERT_GE(grp, r0);
          ASSERT_LT(grp, r0 + groups);
          ASSERT_GE(tile, 0);
          ASSERT_LT(tile, nt);
          ++seen[(grp - r0) * nt + tile];
        }
      }
      for (int c : seen) EXPECT_EQ(c, 1) << "nt " << nt << " groups " << groups;
    }
  }
}

// The strided split of the gate_up units: every unit in exactly one CTA, and the counts within
// one of each other.
TEST(FusedStridedUnits, EveryUnitOnce) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 500; ++trial) {
    FusedWork w;
    w.ng_gu = 1 + rng() % 400;
    w.ntiles = rng() % (kTinyPairs + 1);
    const int G = 1 + rng() % 200, n = w.ntiles * w.ng_gu;
    std::vector<int> seen(n, 0);
    int most = 0, least = n;
    for (int b = 0; b < G; ++b) {
      const int c = FusedStridedUnits(w, b, G);
      most = std::max(most, c), least = std::min(least, c);
      for (int i = 0; i < c; ++i) {
        const int u = b + i * G;
        ASSERT_LT(u, n) << "trial " << trial;
        ++seen[u];
      }
    }
    for (int u = 0; u < n; ++u) ASSERT_EQ(seen[u], 1) << "unit " << u << " trial " << trial;
    EXPECT_LE(most - least, 1);
  }
}

// The slots the plan gives: at most depth per warp, all that fit otherwise, spread with at most one
// more per warp, and none when one per warp does not fit. Against a count one slot at a time.
TEST(FusedSlots, AsManyAsFitSpreadOverTheWarps) {
  std::mt19937 rng(31);
  for (int trial = 0; trial < 20000; ++trial) {
    const int warps = 1 + rng() % 32, depth = 1 + rng() % 3, slot = 16 * (1 + rng() % 600);
    const size_t room = rng() % (size_t(slot) * 100);
    FusedArgs f;
    f.depth = -7;
    int want = 0;  // slots handed out one at a time while one more fits and a warp has room
    while (want < warps * depth && size_t(want + 1) * slot <= room) ++want;
    const bool ok = FusedSlots(room, slot, warps, depth, f);
    ASSERT_EQ(ok, want >= warps) << "trial " << trial;
    if (!ok) {
      EXPECT_EQ(f.depth, -7);  // left as it was
      continue;
    }
    EXPECT_EQ(warps * f.depth + f.deep, want) << "trial " << trial;
    EXPECT_GE(f.depth, 1);
    EXPECT_LE(f.depth + (f.deep > 0 ? 1 : 0), depth);
    EXPECT_GE(f.deep, 0);
    EXPECT_LT(f.deep, warps);
  }
  FusedArgs f;  // gpt-oss-120b at 6 parts: 4,352-byte slots beside 61,388 fixed bytes
  ASSERT_TRUE(FusedSlots(231424 - 61388, 4352, 16, 2, f));
  EXPECT_EQ(f.depth, 2);
  EXPECT_EQ(f.deep, 0);
  ASSERT_TRUE(FusedSlots(231424 - 61388, 4352, 24, 2, f));
  EXPECT_EQ(24 * f.depth + f.deep, 39);
}

TEST(ParseFusedPin, BuiltConfigurationsOffAndRejects) {
  const FusedPinned def = ParseFusedPin("");
  EXPECT_TRUE(def.valid);
  EXPECT_FALSE(def.off);
  EXPECT_EQ(def.parts, 4);
  EXPECT_EQ(def.depth, 2);
  EXPECT_EQ(def.warps, 16);
  const FusedPinned named = ParseFusedPin("default");  // envab's name for the code's own choice
  EXPECT_TRUE(named.valid);
  EXPECT_FALSE(named.off);
  EXPECT_EQ(named.parts, def.parts);
  EXPECT_EQ(named.depth, def.depth);
  EXPECT_EQ(named.warps, def.warps);
  EXPECT_TRUE(ParseFusedPin("off").off);
  EXPECT_TRUE(ParseFusedPin("0").off);
  const FusedPinned p = ParseFusedPin("6x2w32");
  EXPECT_TRUE(p.valid);
  EXPECT_EQ(p.parts, 6);
  EXPECT_EQ(p.depth, 2);
  EXPECT_EQ(p.warps, 32);
  for (const char* ok : {"3x1", "4x2", "4x1w16", "6x2w16", "6x3w16", "8x2", "6x2w20", "4x1w24", "6x1w24", "8x2w24", "6x1w32"}) {
    EXPECT_TRUE(ParseFusedPin(ok).valid) << ok;
    EXPECT_FALSE(ParseFusedPin(ok).off) << ok;
  }
  for (const char* bad : {"5x1", "2x1", "4x4", "4x0", "4x1w20", "4x1w", "4x1junk", "4x1w24x", "x1", "4", "on"}) {
    EXPECT_FALSE(ParseFusedPin(bad).valid) << bad;
  }
}

}  // namespace
}  // namespace mxserve::kernels::cuda::internal
