#include "coordinator/engine/block_manager.h"

#include <random>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace mxserve {
namespace {

TEST(BlockManagerTest, AppendSlotGrowsByBlocks) {
  BlockManager bm(4, 16);
  std::vector<int32_t> t;
  EXPECT_TRUE(bm.AppendSlot(&t, 1));
  EXPECT_EQ(t.size(), 1u);
  EXPECT_TRUE(bm.AppendSlot(&t, 16));
  EXPECT_EQ(t.size(), 1u);
  EXPECT_TRUE(bm.AppendSlot(&t, 17));
  EXPECT_EQ(t.size(), 2u);
  EXPECT_FALSE(bm.AppendSlot(&t, 16 * 5));  // needs 5 blocks, pool has 4
  EXPECT_EQ(t.size(), 2u);                  // unchanged on failure
  EXPECT_EQ(bm.num_used_blocks(), 2);
  bm.Free(&t);
  EXPECT_TRUE(t.empty());
  EXPECT_EQ(bm.num_free_blocks(), 4);
}

// Random grow/free traffic against a slow twin (a set of owned ids per table).
TEST(BlockManagerTest, NeverSharesBlocksUnderRandomTraffic) {
  std::mt19937 rng(7);
  BlockManager bm(37, 4);
  std::vector<std::vector<int32_t>> tables(9);
  std::vector<int> lens(9, 0);
  for (int iter = 0; iter < 5000; ++iter) {
    const int i = rng() % tables.size();
    if (rng() % 5 == 0) {
      bm.Free(&tables[i]);
      lens[i] = 0;
    } else {
      const int want = lens[i] + 1 + rng() % 6;
      const int need = (want + 3) / 4 - static_cast<int>(tables[i].size());
      const bool can = need <= bm.num_free_blocks();
      const bool ok = bm.AppendSlot(&tables[i], want);
      EXPECT_EQ(ok, can);
      if (ok) lens[i] = want;
    }
    std::set<int32_t> seen;
    int owned = 0;
    for (size_t k = 0; k < tables.size(); ++k) {
      EXPECT_GE(static_cast<int>(tables[k].size()) * 4, lens[k]);
      for (int32_t b : tables[k]) {
        ASSERT_TRUE(seen.insert(b).second) << "block " << b << " in two tables";
        ASSERT_TRUE(bm.IsUsed(b));
        ++owned;
      }
    }
    ASSERT_EQ(owned, bm.num_used_blocks());
  }
  for (auto& t : tables) bm.Free(&t);
  EXPECT_EQ(bm.num_used_blocks(), 0);
}

}  // namespace
}  // namespace mxserve
