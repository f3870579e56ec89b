// The GEMMs only kernels/cuda/lab builds, launched through Variant::lab_gemm.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace mxserve::kernels::cuda::internal {

struct CombineArgs;
struct FusedPlan;
struct GemmArgs;
struct SelfRoute;

// The register-A wgmma GEMM with the weights loaded by each warp one chunk ahead (wgmma_ldg.cu)
// in configuration `config` (Variant::wgmma_cfg 3 ... 10) at tile height bn (32 ... 256): as
// LaunchWgmmaGemm (-1 for another bn or config).
int LaunchWgmmaLdgGemm(const GemmArgs& a, bool gate_up, bool one_mul, int bn, int max_tiles, int config,
                       cudaStream_t stream);
// The weights-through-shared-memory wgmma GEMM (wgmma_ss.cu; tiles of `tokens` = 128, 192 or 64
// token rows): as LaunchWgmmaGemm.
// The K-streamed decode kernel's configurations kAuto never runs (decode_kst_variants.cu):
// Variant::lab_kst.
int LaunchDecodeKstLab(const GemmArgs& a, bool gate_up, bool one_mul, int slice_chunks, int tile_rows,
                       int max_tiles, cudaStream_t stream);
// The paired decode launch in the fixed order (queue false) or with phase stamps
// (decode_kst_pair_variants.cu): Variant::lab_pair.
int LaunchDecodeKstPairLab(const GemmArgs& g, const GemmArgs& d, bool one_mul, int max_tiles, const CombineArgs& c,
                           int32_t* done, bool queue, bool stamps, cudaStream_t stream);
// With MXSERVE_PLAN pair_probe=stamps: when each phase of the last paired launch ended per CTA,
// over the grid, and how many items the CTAs took (a table for the bench).
std::string PairStampsReport();
// The fused layer in the configurations other than kAuto's (fused_variants.cu): Variant::lab_fused,
// and the table of the stamps they record (Variant::lab_fused_stamps).
cudaError_t LaunchFusedLab(const GemmArgs& g, const GemmArgs& d, const SelfRoute& sr, const FusedPlan& pl,
                           bool one_mul, cudaStream_t stream);
std::string FusedStampsReportLab(const int (&plan)[4]);
// The TMA-fed wgmma GEMM in the forms kAuto never runs (wgmma_tma_variants.cu): Variant::lab_wgmma.
int LaunchWgmmaTmaLab(const GemmArgs& a, bool gate_up, bool one_mul, int bn, int max_tiles, bool persist,
                      cudaStream_t stream);
int LaunchWgmmaSsGemm(const GemmArgs& a, bool gate_up, bool one_mul, int tokens, int max_tiles, cudaStream_t stream);

}  // namespace mxserve::kernels::cuda::internal
