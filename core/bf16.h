// bfloat16 <-> float conversion (round to nearest even; NaN stays NaN).
#pragma once

#include <cstdint>
#include <cstring>

namespace mxserve {

inline float Bf16ToFloat(uint16_t h) {
  uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The bf16 bits of the float with bits u; host and device (the GPU worker narrows its output
// with it, so that both sides give the same bytes).
#if defined(__CUDACC__)
__host__ __device__
#endif
inline uint16_t Bf16BitsOf(uint32_t u) {
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline uint16_t FloatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return Bf16BitsOf(u);
}

}  // namespace mxserve
