// The wgmma SS kernel's shared-memory placement of decoded weights (moe_cuda_swizzle.h):
// the lanes of one 8-row group cover each (row, k) of a 64-K slab exactly once, and the byte
// offsets are CuTe's Swizzle<3, 4, 3> of the row-major offset (what TMA's 128-byte swizzle
// writes for the activations the same wgmma reads), pairs landing 4-byte aligned, one row per
// 128 bytes. The kernel stores with stmatrix: its addresses must put every register pair where
// the per-register placement (SsDequantK) does, one wavefront per 8 x 8 matrix. (The per-register
// stores, the kernel's first version, were conflict-free too: the third test.)
#include <set>
#include <utility>

#include "gtest/gtest.h"
#include "kernels/cuda/moe_cuda_swizzle.h"

namespace mxserve::kernels::cuda::internal {
namespace {

// CuTe's Swizzle<B = 3, M = 4, S = 3> on a byte offset: bits [4, 7) ^= bits [7, 10).
uint32_t CuteSwizzle343(uint32_t off) { return off ^ (((off >> 7) & 7u) << 4); }

TEST(SsSwizzle, LanesCoverEverySlabElementOnce) {
  std::set<std::pair<int, int>> seen;  // (row g, k)
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane >> 2, t = lane & 3;
    for (int bb = 0; bb < 2; ++bb)
      for (int u = 0; u < 4; ++u) {
        const int k = SsDequantK(bb, u, t);
        ASSERT_EQ(k % 2, 0);
        ASSERT_TRUE(seen.insert({g, k}).second) << "lane " << lane << " bb " << bb << " u " << u;
        ASSERT_TRUE(seen.insert({g, k + 1}).second);
      }
  }
  EXPECT_EQ(seen.size(), 8u * 64u);
  for (const auto& [g, k] : seen) {
    EXPECT_GE(k, 0);
    EXPECT_LT(k, 64);
  }
}

TEST(SsSwizzle, OffsetsAreCuteSwizzle343OfRowMajor) {
  for (int n = 0; n < 256; ++n)
    for (int k = 0; k < 64; ++k) {
      const uint32_t plain = uint32_t(n) * 128u + uint32_t(k) * 2u;
      ASSERT_EQ(SwizzledOffset128(n, k), CuteSwizzle343(plain)) << "n " << n << " k " << k;
      ASSERT_EQ(SwizzledOffset128(n, k) / 128u, uint32_t(n));
    }
}

TEST(SsSwizzle, OneRegisterStoreOfAWarpHitsEveryBankOnce) {
  // Group j's store of register u of block bb: lanes (g, t) write row 8 G + g, k = SsDequantK.
  for (int G = 0; G < 16; ++G)
    for (int bb = 0; bb < 2; ++bb)
      for (int u = 0; u < 4; ++u) {
        std::set<uint32_t> banks;
        for (int lane = 0; lane < 32; ++lane) {
          const uint32_t off = SwizzledOffset128(8 * G + (lane >> 2), SsDequantK(bb, u, lane & 3));
          ASSERT_EQ(off % 4, 0u);
          banks.insert((off / 4) % 32);
        }
        EXPECT_EQ(banks.size(), 32u) << "G " << G << " bb " << bb << " u " << u;
      }
}

TEST(SsSwizzle, StmatrixStoresWhereThePerRegisterStoresDo) {
  // stmatrix.m8n8.x4: element (row r, column c) of matrix i comes from lane 4 r + c / 2,
  // register i, half c % 2, and lands at the address lane 8 i + r gave, plus 2 c.
  for (int G = 0; G < 16; ++G)
    for (int bb = 0; bb < 2; ++bb)
      for (int i = 0; i < 4; ++i)
        for (int r = 0; r < 8; ++r)
          for (int c = 0; c < 8; ++c) {
            const int lane = 4 * r + c / 2;
            const uint32_t got = uint32_t(G) * 1024u + SsStmatrixOffset(8 * i + r, bb) + 2u * uint32_t(c);
            const uint32_t want = SwizzledOffset128(8 * G + (lane >> 2), SsDequantK(bb, i, lane & 3)) + 2u * (c % 2);
            ASSERT_EQ(got, want) << "G " << G << " bb " << bb << " matrix " << i << " row " << r << " col " << c;
          }
}

TEST(SsSwizzle, StmatrixRowsOfOneMatrixHitEveryBankGroupOnce) {
  // One matrix's 8 rows of 16 bytes are one shared-memory wavefront when their 16-byte
  // chunks fall in 8 distinct 4-bank groups.
  for (int bb = 0; bb < 2; ++bb)
    for (int i = 0; i < 4; ++i) {
      std::set<uint32_t> groups;
      for (int r = 0; r < 8; ++r) {
        const uint32_t off = SsStmatrixOffset(8 * i + r, bb);
        ASSERT_EQ(off % 16, 0u);
        groups.insert((off / 16) % 8);
      }
      EXPECT_EQ(groups.size(), 8u) << "bb " << bb << " matrix " << i;
    }
}

}  // namespace
}  // namespace mxserve::kernels::cuda::internal
