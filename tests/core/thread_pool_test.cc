#include "core/thread_pool.h"

#include <atomic>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace mxserve {
namespace {

TEST(ThreadPool, EveryIndexOnce) {
  for (int threads : {1, 2, 4, 0}) {
    ThreadPool pool(threads);
    EXPECT_GE(pool.size(), 1);
    for (int64_t n : {0, 1, 2, 7, 1000}) {
      std::vector<std::atomic<int>> hits(n);
      pool.ParallelFor(n, [&](int64_t i) { hits[i].fetch_add(1); });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << threads << " " << n << " " << i;
    }
  }
}

TEST(ThreadPool, UsesSeveralThreadsIncludingCaller) {
  ThreadPool pool(4);
  EXPECT_EQ(pool.size(), 4);
  std::atomic<int> inside{0}, max_inside{0};
  std::atomic<bool> caller_worked{false};
  const auto caller = std::this_thread::get_id();
  pool.ParallelFor(64, [&](int64_t) {
    const int now = inside.fetch_add(1) + 1;
    int m = max_inside.load();
    while (now > m && !max_inside.compare_exchange_weak(m, now)) {}
    if (std::this_thread::get_id() == caller) caller_worked = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    inside.fetch_sub(1);
  });
  EXPECT_GT(max_inside.load(), 1);
  EXPECT_TRUE(caller_worked.load());
}

TEST(ThreadPool, ConcurrentCallersAreSerialisedAndComplete) {
  ThreadPool pool(3);
  std::atomic<int64_t> total{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&] {
      for (int rep = 0; rep < 50; ++rep) {
        pool.ParallelFor(100, [&](int64_t i) { total.fetch_add(i); });
      }
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(total.load(), 4 * 50 * (99 * 100 / 2));
}

TEST(ThreadPool, NestedCallRunsInline) {
  ThreadPool pool(2);
  std::atomic<int> count{0};
  pool.ParallelFor(4, [&](int64_t) { pool.ParallelFor(3, [&](int64_t) { count.fetch_add(1); }); });
  EXPECT_EQ(count.load(), 12);
}

}  // namespace
}  // namespace mxserve
