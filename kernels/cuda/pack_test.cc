// The upload layout's nibble packing (moe_cuda_pack.h) against the E2M1 table: every nibble in
// every register and half decodes to its value (times 2^-126) and leaves the other seven weights'
// bits alone; random words decode to all eight of their weights at once.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>

#include "gtest/gtest.h"
#include "kernels/cuda/moe_cuda_pack.h"

namespace mxserve::kernels::cuda::internal {
namespace {

// E2M1 (OCP MX): sign, 2 exponent bits (bias 1), 1 mantissa bit; exponent 0 is subnormal.
float E2M1(uint32_t nib) {
  static const float kMag[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  return (nib & 8u) ? -kMag[nib & 7u] : kMag[nib & 7u];
}

float Bf16(uint32_t bits16) {
  const uint32_t f = bits16 << 16;
  float v;
  std::memcpy(&v, &f, 4);
  return v;
}

// Weight `half` of register j, as Decode4 leaves it, scaled back by 2^126.
float Decoded(const uint32_t (&r)[4], int j, int half) {
  return std::ldexp(Bf16((r[j] >> (16 * half)) & 0xFFFFu), 126);
}

TEST(Pack, PositionsCoverTheWordOnce) {
  uint32_t seen = 0;
  for (int j = 0; j < 4; ++j)
    for (int half = 0; half < 2; ++half) {
      const uint32_t bits = PackNibble(0xF, j, half);
      EXPECT_EQ(__builtin_popcount(bits), 4) << "register " << j << " half " << half;
      EXPECT_EQ(seen & bits, 0u) << "register " << j << " half " << half << " overlaps";
      seen |= bits;
    }
  EXPECT_EQ(seen, 0xFFFFFFFFu);
}

TEST(Pack, EveryNibbleInEveryPlaceDecodesToItsValue) {
  for (int j = 0; j < 4; ++j)
    for (int half = 0; half < 2; ++half)
      for (uint32_t nib = 0; nib < 16; ++nib) {
        uint32_t r[4];
        Decode4(PackNibble(nib, j, half), r);
        for (int j2 = 0; j2 < 4; ++j2)
          for (int h2 = 0; h2 < 2; ++h2) {
            const float want = (j2 == j && h2 == half) ? E2M1(nib) : 0.f;
            EXPECT_EQ(Decoded(r, j2, h2), want)
                << "nibble " << nib << " packed as register " << j << " half " << half << ", read from register "
                << j2 << " half " << h2;
          }
        // Only the target bits: a stray bit outside the mask would change values once scaled.
        for (int j2 = 0; j2 < 4; ++j2) EXPECT_EQ(r[j2] & ~kPackMask, 0u);
      }
}

TEST(Pack, RandomWordsDecodeAllEightWeights) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 20000; ++trial) {
    uint32_t nib[4][2], w = 0;
    for (int j = 0; j < 4; ++j)
      for (int half = 0; half < 2; ++half) {
        nib[j][half] = rng() & 15u;
        w |= PackNibble(nib[j][half], j, half);
      }
    uint32_t r[4];
    Decode4(w, r);
    for (int j = 0; j < 4; ++j)
      for (int half = 0; half < 2; ++half) {
        ASSERT_EQ(Decoded(r, j, half), E2M1(nib[j][half])) << "word " << std::hex << w << " register " << j;
      }
  }
}

}  // namespace
}  // namespace mxserve::kernels::cuda::internal
