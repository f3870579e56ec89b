// Tensor-memory-accelerator helpers shared by the kernels that load through TMA tensor maps
// (moe_cuda_wgmma_tma.cu, moe_cuda_decode_kst.cu, lab/), private to kernels/cuda; moe_cuda_tma.cc.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include <cstdint>

namespace mxserve::kernels::cuda::internal {

// The driver's cuTensorMapEncodeTiled, or nullptr when this driver has none (then no TMA path
// may run). Looked up once.
PFN_cuTensorMapEncodeTiled_v12000 TensorMapEncoder();

struct GemmArgs;
// The wgmma kernels' token operand: 64-K slabs x box_rows rows of a.a ([a.rows][a.kp] bf16),
// 128-byte swizzle. 0, -1 without an encoder, else the failed CUresult.
int EncodeActivationSlabs(const GemmArgs& a, int box_rows, CUtensorMap* map);

// A 2D u64 tensor map over `rows` rows of row_bytes bytes at base, boxes of box_bytes x box_rows
// rows, no swizzle (moe_cuda_decode_kst.cu: the upload layout's weight and scale rows, one row
// per 8-row group).
CUresult EncodeRows(CUtensorMap* map, const uint8_t* base, int64_t rows, int64_t row_bytes, int box_bytes,
                    int box_rows);
// The weight and scale maps of a.q and a.sc over all groups of all held experts (EncodeRows),
// boxes of box_chunks 128-K chunks x box_groups groups: CUDA_SUCCESS or the failed CUresult.
CUresult EncodeWeightMaps(const GemmArgs& a, int box_chunks, int box_groups, CUtensorMap* wmap, CUtensorMap* smap);

#ifdef __CUDACC__
// One 2D box of `map` at element coordinates (c0, c1) into shared memory, completing on `bar`
// (its bytes count toward the barrier's expected transaction bytes; out-of-bounds parts of the box
// arrive as zeros and count too).
__device__ __forceinline__ void TmaLoad2d(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];"
      ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(dst))), "l"(reinterpret_cast<uint64_t>(map)),
      "r"(c0), "r"(c1), "r"(static_cast<uint32_t>(__cvta_generic_to_shared(bar)))
      : "memory");
}
#endif

}  // namespace mxserve::kernels::cuda::internal
