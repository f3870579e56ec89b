// Deterministic, counter-based random numbers for synthetic weights: every row of every tensor
// has its own stream keyed by (seed, tensor name, row), so rows can be filled in parallel and
// the bytes never depend on the thread count.
#pragma once

#include <cstdint>
#include <string_view>

namespace mxserve::make_model {

class RowRng {
 public:
  RowRng(uint64_t seed, std::string_view tensor, int64_t row);
  uint64_t Next();
  float Uniform(float lo, float hi);  // [lo, hi)
  // Approximately normal (Irwin-Hall of 4 uniforms, rescaled): mean 0, std 1, bounded by
  // +-3.46. Cheap enough for gpt-oss-120b-sized tensors.
  float Normal();

 private:
  uint64_t state_;
};

}  // namespace mxserve::make_model
