// The MXFP4 codec (OCP MX v1.0; docs/MODELS.md): E2M1 elements, one E8M0 scale
// per 32 elements, two elements per byte with the LOW nibble holding the EVEN element.
//
// Scale rule (the one documented choice): byte s means 2^(s-127) for s in 0x00..0xFE.
// 0xFF is NaN in the OCP spec; we decode it as NaN (every element of the block becomes NaN),
// and the loader rejects a checkpoint that contains it (a NaN scale in weights is corruption).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace mxserve::mxfp4 {

inline constexpr int kBlockSize = 32;       // elements per scale
inline constexpr int kBlockBytes = 16;      // packed bytes per block
inline constexpr uint8_t kNanScale = 0xFF;

// E2M1 code (0..15) -> value.
inline constexpr float kE2M1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                    -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

// 2^(s-127) for s < 0xFF; NaN for 0xFF. Exact for every byte (0x00 gives 2^-127, a subnormal).
float ScaleToFloat(uint8_t s);

// Decodes one block (16 bytes + 1 scale) into 32 floats.
void DecodeBlock(const uint8_t* packed16, uint8_t scale, float* out32);

// Decodes a row of `n` elements (n % 32 == 0): packed [n/2] bytes, scales [n/32].
void DecodeRow(const uint8_t* packed, const uint8_t* scales, int64_t n, float* out);

// Nearest E2M1 code for v (ties to even code), saturating at +-6. Used by the quantizer/tests.
uint8_t EncodeE2M1(float v);

// Quantizes a row (n % 32 == 0) to MXFP4: per block, scale = 2^(floor(log2(amax)) - 2) (so the
// block max lands in [4, 8) before rounding, as OCP's reference does), elements rounded to
// nearest (EncodeE2M1; values in [6, 8) saturate to 6). Scale bytes clamp to [0x00, 0xFE]; an
// all-zero block gets scale byte 127 (1.0); NaN inputs encode as +0. packed [n/2], scales [n/32].
void EncodeRow(const float* in, int64_t n, uint8_t* packed, uint8_t* scales);

// Index of the first 0xFF (NaN) scale byte in scales[0, n), or -1: loaders reject weights
// holding one.
int64_t FindNanScale(const uint8_t* scales, int64_t n);

}  // namespace mxserve::mxfp4
