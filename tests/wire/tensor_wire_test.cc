// The wire codec's vectorised F32<->BF16 loops against core/bf16.h's scalar twins, on random
// bit patterns (NaNs, infinities, subnormals, rounding ties) and odd lengths.
#include "wire/tensor_wire.h"

#include <cstring>
#include <random>
#include <thread>

#include "core/bf16.h"
#include "core/thread_pool.h"
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

// The pooled encode / decode against the one-thread ones, byte for byte: lengths around the
// threshold and the 64-element part boundaries, misaligned BF16 input, both dtypes, and four
// threads calling on one pool at once (ParallelFor serialises them).
TEST(TensorWireTest, PooledCopiesMatchTheOneThreadOnes) {
  ThreadPool pool(4);
  const size_t t = kParallelWireBytes / 4;  // the threshold, in floats
  auto check = [&pool](size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<float> x(n);
    for (float& v : x) {
      const uint32_t u = rng();
      std::memcpy(&v, &u, 4);
    }
    for (v1::TensorDType dtype : {v1::TENSOR_DTYPE_F32, v1::TENSOR_DTYPE_BF16}) {
      const size_t bytes = n * WireDTypeSize(dtype);
      std::vector<char> one(bytes + 1), pooled(bytes + 1);
      EncodeTensorTo(x.data(), n, dtype, one.data());
      EncodeTensorTo(x.data(), n, dtype, pooled.data(), &pool);
      ASSERT_EQ(0, std::memcmp(one.data(), pooled.data(), bytes)) << "encode n " << n << " dtype " << dtype;
      if (dtype == v1::TENSOR_DTYPE_F32) {
        ASSERT_EQ(0, std::memcmp(one.data(), x.data(), bytes)) << n;
      }
      // Decoding from an odd address (the BF16 path copies to an aligned buffer first).
      std::memmove(pooled.data() + 1, pooled.data(), bytes);
      std::vector<float> a(n), b(n, -1.f);
      DecodeTensorInto(one.data(), n, dtype, a.data());
      DecodeTensorInto(pooled.data() + 1, n, dtype, b.data(), &pool);
      ASSERT_EQ(0, std::memcmp(a.data(), b.data(), n * 4)) << "decode n " << n << " dtype " << dtype;
    }
  };
  uint32_t seed = 5;
  for (size_t n : {size_t(0), size_t(1), t - 1, t, t + 1, 2 * t + 63, 2 * t + 64, 3 * t + 65, 5 * t + 17}) {
    check(n, seed++);
  }
  std::vector<std::thread> callers;
  for (int i = 0; i < 4; ++i) callers.emplace_back([&check, i] { check(3 * (kParallelWireBytes / 4) + 7 * i, 100 + i); });
  for (auto& c : callers) c.join();
}

}  // namespace
}  // namespace mxserve
