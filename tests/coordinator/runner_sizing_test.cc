#include "coordinator/gpu/runner_sizing.h"

#include <gtest/gtest.h>

#include <random>

namespace mxserve::gpu {
namespace {

constexpr int64_t GiB = int64_t{1} << 30, MiB = int64_t{1} << 20;

KvBudget Card80() {
  KvBudget b;
  b.total_bytes = 80 * GiB;
  b.free_at_start = 79 * GiB;   // the context and other processes hold 1 GiB
  b.free_bytes = 60 * GiB;      // the runner's weights and activations took 19 GiB
  b.utilization = 0.9;
  b.headroom_bytes = 256 * MiB;
  b.bytes_per_block = 1 * MiB;
  return b;
}

TEST(KvCacheBlocks, UtilizationIsTheRunnersShareLessWhatItHolds) {
  const KvBudget b = Card80();
  // 0.9 * 80 GiB - 19 GiB held - 256 MiB headroom.
  EXPECT_EQ(KvCacheBlocks(b), (72 * GiB - 19 * GiB - 256 * MiB) / MiB);
}

TEST(KvCacheBlocks, OtherProcessesDoNotShrinkTheShareButFreeMemoryBoundsIt) {
  KvBudget b = Card80();
  b.free_at_start = 40 * GiB;  // a worker on the card holds 39 GiB
  b.free_bytes = 21 * GiB;     // the runner took 19 GiB
  // The share would allow 53 GiB; only 21 GiB - 256 MiB are free.
  EXPECT_EQ(KvCacheBlocks(b), (21 * GiB - 256 * MiB) / MiB);
  b.leave_free_bytes = 5 * GiB;  // the worker's scratch still to come
  EXPECT_EQ(KvCacheBlocks(b), (16 * GiB - 256 * MiB) / MiB);
}

TEST(KvCacheBlocks, ExplicitBytesWinButStayWithinFreeMemory) {
  KvBudget b = Card80();
  b.kv_cache_bytes = 2 * GiB;
  EXPECT_EQ(KvCacheBlocks(b), 2048);
  b.kv_cache_bytes = 100 * GiB;
  EXPECT_EQ(KvCacheBlocks(b), (60 * GiB - 256 * MiB) / MiB);
}

TEST(KvCacheBlocks, NothingLeftIsZeroNeverNegative) {
  KvBudget b = Card80();
  b.utilization = 0.2;  // 16 GiB share, 19 GiB already held
  EXPECT_EQ(KvCacheBlocks(b), 0);
  b = Card80();
  b.free_bytes = 100 * MiB;
  b.free_at_start = 100 * MiB;
  EXPECT_EQ(KvCacheBlocks(b), 0);
}

// Against the rule written out: the smallest of 1, 2, 4, 8, 16, 24, ... that holds the batch.
TEST(GraphBucket, SmallestCaptureSizeThatHoldsTheBatch) {
  std::vector<int> sizes = {1, 2, 4, 8};
  for (int s = 16; s <= 512; s += 8) sizes.push_back(s);
  for (int batch = 1; batch <= 512; ++batch) {
    int want = 0;
    for (int s : sizes) {
      if (s >= batch) {
        want = s;
        break;
      }
    }
    EXPECT_EQ(GraphBucket(batch, 512), want) << batch;
    EXPECT_LE(GraphBucket(batch, 64), 64);
    if (batch <= 64) EXPECT_GE(GraphBucket(batch, 64), batch);
  }
}

}  // namespace
}  // namespace mxserve::gpu
