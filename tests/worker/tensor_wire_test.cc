// The wire codec's vectorised F32<->BF16 loops against core/bf16.h's scalar twins, on random
// bit patterns (NaNs, infinities, subnormals, rounding ties) and odd lengths.
#include "worker/tensor_wire.h"

#include <cstring>
#include <random>

#include "core/bf16.h"
#include "gtest/gtest.h"

namespace mxserve {
namespace {

TEST(TensorWireTest, Bf16MatchesScalarTwinBitForBit) {
  std::mt19937 rng(42);
  for (size_t n : {0u, 1u, 7u, 31u, 1000u, 4099u}) {
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i) {
      uint32_t u = rng();
      switch (i % 5) {
        case 0: u = (u & 0x807fffffu) | 0x7f800000u; break;  // inf / NaN
        case 1: u &= 0x807fffffu; break;                     // zero / subnormal
        case 2: u = (u & 0xffff0000u) | 0x8000u; break;      // exact tie
        default: break;
      }
      std::memcpy(&x[i], &u, 4);
    }
    std::string bytes;
    EncodeTensor(x.data(), n, v1::TENSOR_DTYPE_BF16, &bytes);
    ASSERT_EQ(bytes.size(), 2 * n);
    for (size_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, bytes.data() + 2 * i, 2);
      ASSERT_EQ(h, FloatToBf16(x[i])) << "i " << i;
    }
    std::vector<float> scratch, into(n);
    const float* y = DecodeTensor(bytes, n, v1::TENSOR_DTYPE_BF16, &scratch);
    DecodeTensorInto(bytes, n, v1::TENSOR_DTYPE_BF16, into.data());
    for (size_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, bytes.data() + 2 * i, 2);
      const float want = Bf16ToFloat(h);
      ASSERT_EQ(std::memcmp(&y[i], &want, 4), 0) << i;
      ASSERT_EQ(std::memcmp(&into[i], &want, 4), 0) << i;
    }
  }
}

TEST(TensorWireTest, F32RoundTripsExactly) {
  std::vector<float> x = {1.0f, -0.0f, 3.14159f, 1e-40f, -7e30f};
  std::string bytes;
  EncodeTensor(x.data(), x.size(), v1::TENSOR_DTYPE_F32, &bytes);
  ASSERT_EQ(bytes.size(), 4 * x.size());
  std::vector<float> scratch, into(x.size());
  const float* y = DecodeTensor(bytes, x.size(), v1::TENSOR_DTYPE_F32, &scratch);
  DecodeTensorInto(bytes, x.size(), v1::TENSOR_DTYPE_F32, into.data());
  EXPECT_EQ(std::memcmp(y, x.data(), bytes.size()), 0);
  EXPECT_EQ(std::memcmp(into.data(), x.data(), bytes.size()), 0);
  EXPECT_EQ(WireDTypeSize(v1::TENSOR_DTYPE_UNSPECIFIED), 0u);
}

}  // namespace
}  // namespace mxserve
