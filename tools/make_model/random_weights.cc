#include "tools/make_model/random_weights.h"

namespace mxserve::make_model {
namespace {

uint64_t SplitMix(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t Fnv1a(std::string_view s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (char c : s) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001B3ull;
  }
  return h;
}

}  // namespace

RowRng::RowRng(uint64_t seed, std::string_view tensor, int64_t row) {
  uint64_t x = seed;
  const uint64_t a = SplitMix(x);
  x = a ^ Fnv1a(tensor);
  const uint64_t b = SplitMix(x);
  x = b ^ (static_cast<uint64_t>(row) * 0xD6E8FEB86659FD93ull);
  state_ = SplitMix(x);
}

uint64_t RowRng::Next() { return SplitMix(state_); }

float RowRng::Uniform(float lo, float hi) {
  const float u = static_cast<float>(Next() >> 40) * (1.0f / 16777216.0f);  // 24 bits
  return lo + (hi - lo) * u;
}

float RowRng::Normal() {
  const uint64_t r = Next();
  float sum = 0.0f;
  for (int i = 0; i < 4; ++i) sum += static_cast<float>((r >> (16 * i)) & 0xFFFF) * (1.0f / 65536.0f);
  return (sum - 2.0f) * 1.7320508f;  // var of the sum is 4/12
}

}  // namespace mxserve::make_model
