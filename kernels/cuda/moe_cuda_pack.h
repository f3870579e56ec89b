// How the upload layout packs eight E2M1 weights into one 32-bit word, and how the kernels unpack
// it into four bf16x2 registers: plain C++ (host and device) so that a CPU test (pack_test.cc)
// checks the round trip for every nibble in every position.
//
// Decode target: a bf16 whose sign is the nibble's sign and whose bits 8..6 (exponent bits 1..0,
// mantissa bit 6) are the nibble's e1 e0 m is the E2M1 value times 2^-126, zero and the
// subnormal 0.5 included; the kernels fold 2^126 into the block scale (FoldedScale).
//
// Layout: register j (0..3) of a word holds two weights, one per 16-bit half. Nibble bits
// (m, e0, e1, s) of register j's low-half weight sit at PackPos(j, 0..3); the high-half weight's
// at the same positions + 16 (mod 32). The positions are chosen so that Decode4 needs four
// shifts and five masks (nine instructions; there is no layout in which one shift and one mask
// per register suffice, an exhaustive search showed): registers 0..2 are the word rotated left by
// 0, 4 and 10 and masked; register 3 takes its m, e0 and sign from the word shifted left by 6 and
// its e1 from the word shifted right by 2.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define MXSERVE_PACK_HD __host__ __device__ __forceinline__
#else
#define MXSERVE_PACK_HD inline
#endif

namespace mxserve::kernels::cuda::internal {

// Bits 15, 8, 7, 6 of both halves: a bf16x2 register's sign, exponent bits 1..0, mantissa bit 6.
inline constexpr uint32_t kPackMask = 0x81C081C0u;

// Low-half position of nibble bit b (0 m, 1 e0, 2 e1, 3 sign) of register j.
MXSERVE_PACK_HD constexpr int PackPos(int j, int b) {
  constexpr int8_t kPos[4][4] = {{6, 7, 8, 15}, {2, 3, 4, 11}, {28, 29, 30, 5}, {0, 1, 10, 9}};
  return kPos[j][b];
}

// The bits of nibble `nib` as register j's weight in half `half` (0 low, 1 high) of a word.
MXSERVE_PACK_HD constexpr uint32_t PackNibble(uint32_t nib, int j, int half) {
  uint32_t v = 0;
  for (int b = 0; b < 4; ++b) v |= ((nib >> b) & 1u) << ((PackPos(j, b) + 16 * half) & 31);
  return v;
}

MXSERVE_PACK_HD constexpr uint32_t RotateLeft(uint32_t w, int d) { return (w << d) | (w >> (32 - d)); }

// Four bf16x2 registers (E2M1 values times 2^-126) from one packed word; undoes PackNibble.
MXSERVE_PACK_HD void Decode4(uint32_t w, uint32_t r[4]) {
  r[0] = w & kPackMask;
  r[1] = (w << 4) & kPackMask;
#if defined(__CUDA_ARCH__)
  r[2] = __funnelshift_l(w, w, 10) & kPackMask;
#else
  r[2] = RotateLeft(w, 10) & kPackMask;
#endif
  r[3] = ((w << 6) & 0x80C080C0u) | ((w >> 2) & 0x01000100u);
}

}  // namespace mxserve::kernels::cuda::internal
