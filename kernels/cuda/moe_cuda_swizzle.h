// Where the wgmma SS kernel's dequant warps put a decoded weight (lab/wgmma_ss.cu): plain
// C++ (host and device) so that a CPU test (swizzle_test.cc) checks it against CuTe's
// formulation of the 128-byte swizzle that TMA writes and wgmma reads.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define MXSERVE_SWZ_HD __host__ __device__ __forceinline__
#else
#define MXSERVE_SWZ_HD inline
#endif

namespace mxserve::kernels::cuda::internal {

// Byte offset of element (row n, k) in a stage of 64-K slabs, [rows][64] bf16, K-major with the
// 128-byte swizzle (stage base 1024-byte aligned): the 16-byte chunk k / 8 of row n lands at
// chunk (k / 8) ^ (n % 8).
MXSERVE_SWZ_HD uint32_t SwizzledOffset128(int n, int k) {
  return uint32_t(n) * 128u + ((uint32_t(k >> 3) ^ uint32_t(n & 7)) << 4) + (uint32_t(k & 7) << 1);
}

// K (within the 64-K slab) of the first of the two bf16 in decoded register u (0..3) of k32 block
// bb (0, 1) of the slab, for lane t (= lane & 3) of the upload layout: Decode4 leaves register
// 2 st + h = k16 step st, k 2t + 8h (+0, +1) of the block (the mma.sync B / wgmma A fragment).
// The reference the stmatrix addresses below are checked against (swizzle_test.cc).
MXSERVE_SWZ_HD int SsDequantK(int bb, int u, int t) { return 32 * bb + 16 * (u >> 1) + 8 * (u & 1) + 2 * t; }

// The address `lane` gives one stmatrix.m8n8.x4 that stores decoded registers 0..3 of k32 block
// bb of an 8-row group at once (byte offset from the group's first row): register u of lane
// (g, t) is row g, columns 2t, 2t + 1 of 8 x 8 matrix u, whose rows are the 16-byte K chunk
// 4 bb + u, so lane l names row l % 8 of matrix l / 8. The same places as SsDequantK's stores.
MXSERVE_SWZ_HD uint32_t SsStmatrixOffset(int lane, int bb) {
  return SwizzledOffset128(lane & 7, 8 * (4 * bb + (lane >> 3)));
}

}  // namespace mxserve::kernels::cuda::internal
