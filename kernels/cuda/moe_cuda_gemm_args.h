// The arguments of the grouped MXFP4 GEMM kernel (moe_cuda_gemm.cuh), shared with host code.
#pragma once

#include <cstdint>

namespace mxserve::kernels::cuda::internal {

// Kernel layout (see README.md): K padded to 64; chunks of 128 K (the last may be 64).
// Within a chunk, lane (g, t) of a warp owns, for row g of an 8-row group, the bytes its mma
// B fragments need (k16 step s: byte 8s+t -> k 2t,2t+1; byte 8s+t+4 -> k 2t+8,2t+9), packed
// so each 32-bit word decodes into four bf16x2 registers with a shift and a mask.
struct GemmArgs {
  const uint8_t* q;       // [held][N/8][chunks] runs of 512 (or 256) bytes
  const uint8_t* sc;      // [held][N/8][chunks][8][4]
  const float* bias;      // [held][N]
  int n;                  // output rows of W
  int kp;                 // padded K
  int nfull;              // full 128-chunks
  int chunks;             // nfull + (tail ? 1 : 0)
  const uint16_t* a;      // [P][kp] bf16, permuted (wgmma paths: plain K order)
  const int32_t* tiles;   // [tiles][3]
  const int32_t* ntiles;  // device count of valid tiles
  int rows;               // rows of a (token-slots): the TMA bound of the wgmma path, and
                          // min(tile height, rows) bounds the rows of any tile
  int held;               // experts in q / sc (the TMA bound of the kst decode path)
  // gate_up epilogue
  uint16_t* act;          // [P][kp_out] bf16, in the down GEMM's order (as a)
  int kp_out, nfull_out;
  float alpha, limit;
  // down epilogue
  float* y;               // [T*k][n] fp32
  const int32_t* sorted;  // [P] pair index by row
  const float* route_w;   // [T*k]
  // The persistent wgmma kernel: each item's wgmma as narrow as its tile's rows allow
  // (moe_cuda_wgmma_tma.cu, ConsumeItem); false: the tile height always.
  bool var_width;
  // The kst decode kernel streams its first stages' weights before waiting for the kernel before
  // it (whose output, a, it waits for): the tile list (tiles, ntiles) is written at least two
  // kernels before either GEMM (LaunchRouting ends with a gather), so it is visible before
  // griddepcontrol.wait. False: it waits first (MXSERVE_PLAN early_weights=off).
  bool early_weights;
};

}  // namespace mxserve::kernels::cuda::internal
