// The register-A wgmma GEMM (WGMMA.md) at every tile height (8 ... 256 token rows), with the
// weights and scales streamed by TMA into shared-memory stages: 5-10 % faster at 1024-16384
// tokens of gpt-oss-120b than each warp loading its weights one chunk ahead (the lab's
// lab/wgmma_ldg.cu, MXSERVE_PLAN wgmma_cfg=ldg). Two forms: one CTA per (tile, column block)
// item (WgmmaTmaKernel), and persistent (WgmmaTmaPersistKernel), which LaunchWgmmaGemm
// takes at 8-24, 64, 96, 192 and 256 rows.
//
// Why: with a lean main loop the warps of the register-A kernel wait most
// for the weights (long-scoreboard stalls 3.8 per issued instruction at 1024 tokens of
// gpt-oss-120b), and one more chunk of lookahead in registers (PF = 2) was slower. Here the lookahead
// is the stage count (three to five chunks) and costs no registers; the kst decode kernel streams its
// weights the same way (its tensor maps, EncodeRows).
//
// Stage (one 128-K chunk): the CTA's 8 NC row groups' weights (512 bytes each, the upload layout),
// their scale words (32 bytes each), then the tile's two 64-K token slabs (128-byte swizzle, as
// lab/wgmma_ldg.cu's stages). One producer thread fills a stage once every consumer warpgroup
// has released it; consumers release a chunk's stage when its last block's wgmma has completed.
// The tail chunk (64 K) has one slab; its weight box runs past the row's end and arrives
// zero-filled. Row groups past this expert's rows read the next expert's (or zeros past the last
// expert): their products reach accumulator rows the epilogue never stores.
//
// The kernels and their launchers are templates in moe_cuda_wgmma_tma.cuh; this file builds the
// forms kAuto runs (LaunchWgmmaTmaGemm), kernels/cuda/lab the others.
#include <cuda_runtime.h>

#include "kernels/cuda/moe_cuda_launch.h"
#include "kernels/cuda/moe_cuda_tma.h"
#include "kernels/cuda/moe_cuda_variant.h"
#include "kernels/cuda/moe_cuda_wgmma_tma.cuh"

namespace mxserve::kernels::cuda::internal {

int LaunchWgmmaTmaGemm(const GemmArgs& a, bool gate_up, bool one_mul, int bn, int max_tiles, bool persist,
                       cudaStream_t stream) {
  if (a.rows <= 0) return 0;
  // Built here: the forms LaunchWgmmaGemm takes for kAuto's heights, persistent at 16, 24, 64, 96,
  // 192 and 256 rows, one CTA per item at 32, 40, 48 and 128. The others (wgmma8, MXSERVE_PLAN
  // wgmma_cfg=tma|persist) are kernels/cuda/lab's (Variant::lab_wgmma).
  const bool built = persist ? bn == 16 || bn == 24 || bn == 64 || bn == 96 || bn == 192 || bn == 256
                             : bn == 32 || bn == 40 || bn == 48 || bn == 128;
  if (!built) {
    const LabWgmmaFn lab = CurrentVariant().lab_wgmma;
    return lab != nullptr ? lab(a, gate_up, one_mul, bn, max_tiles, persist, stream) : -1;
  }
  CUtensorMap tmap;
  if (const int r = EncodeActivationSlabs(a, bn, &tmap); r != 0) return r;
  switch (bn) {
    // 16 rows persistent (kAuto's wgmma16): five consumer warpgroups, not six, so that each
    // wgmma group can span two blocks (ConsumeChunk's kG) and gpt-oss's 2880 rows are nine whole
    // 320-row column blocks (at 384 the last streamed half a block of the next expert's rows):
    // 256 tokens of gpt-oss-120b 0.575 -> 0.520 ms.
    case 16: return LaunchTBn<16, 5, true>(tmap, a, gate_up, one_mul, max_tiles, stream);
    case 24: return LaunchTBn<24, 6, true>(tmap, a, gate_up, one_mul, max_tiles, stream);
    case 32: return LaunchTBn<32, 6, false>(tmap, a, gate_up, one_mul, max_tiles, stream);
    case 40: return LaunchTBn<40, 6, false>(tmap, a, gate_up, one_mul, max_tiles, stream);
    case 48: return LaunchTBn<48, 6, false>(tmap, a, gate_up, one_mul, max_tiles, stream);
    case 64: return LaunchTBn<64, 5, true>(tmap, a, gate_up, one_mul, max_tiles, stream);
    case 96: return LaunchTBn<96, 4, true>(tmap, a, gate_up, one_mul, max_tiles, stream);
    case 128: return LaunchTBn<128, 4, false>(tmap, a, gate_up, one_mul, max_tiles, stream);
    case 192: return LaunchTBn<192, 3, true>(tmap, a, gate_up, one_mul, max_tiles, stream);
    default: return LaunchTBn<256, 2, true>(tmap, a, gate_up, one_mul, max_tiles, stream);
  }
}

int LaunchWgmmaGemm(const GemmArgs& a, bool gate_up, bool one_mul, int bn, int max_tiles, cudaStream_t stream) {
  if (a.rows <= 0) return 0;
  const int cfg = CurrentVariant().wgmma_cfg;
  const bool persist = bn < 32 ? cfg != 1 : cfg == 2 || (cfg != 1 && bn >= 64 && bn != 128);
  return LaunchWgmmaTmaGemm(a, gate_up, one_mul, bn, max_tiles, persist, stream);
}

}  // namespace mxserve::kernels::cuda::internal
