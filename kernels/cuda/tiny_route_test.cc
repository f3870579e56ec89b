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

}  // namespace
}  // namespace mxserve::kernels::cuda::internal
