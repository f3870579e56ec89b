#include "kernels/cuda/lab/lab.h"

#include "kernels/cuda/lab/lab_kernels.h"
#include "kernels/cuda/lab/plan_option.h"
#include "kernels/cuda/moe_cuda_launch.h"
#include "kernels/cuda/moe_cuda_plan.h"
#include "kernels/cuda/moe_cuda_tile_choice.h"
#include "kernels/cuda/moe_cuda_variant.h"

namespace mxserve::kernels::cuda::lab {
namespace {

int LabGemm(const internal::GemmArgs& a, bool gate_up, int path, bool one_mul, int max_tiles, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (path >= internal::kPathSs) {
    return internal::LaunchWgmmaSsGemm(a, gate_up, one_mul, internal::PathBm(path), max_tiles, s);
  }
  return internal::LaunchWgmmaLdgGemm(a, gate_up, one_mul, internal::PathBm(path), max_tiles,
                                      internal::CurrentVariant().wgmma_cfg, s);
}

int LabKst(const internal::GemmArgs& a, bool gate_up, bool one_mul, int slice_chunks, int tile_rows, int max_tiles,
           void* stream) {
  return internal::LaunchDecodeKstLab(a, gate_up, one_mul, slice_chunks, tile_rows, max_tiles,
                                      static_cast<cudaStream_t>(stream));
}

int LabPair(const internal::GemmArgs& g, const internal::GemmArgs& d, bool one_mul, int max_tiles,
            const internal::CombineArgs& c, int32_t* done, bool queue, bool stamps, void* stream) {
  return internal::LaunchDecodeKstPairLab(g, d, one_mul, max_tiles, c, done, queue, stamps,
                                          static_cast<cudaStream_t>(stream));
}

int LabFused(const internal::GemmArgs& g, const internal::GemmArgs& d, const internal::SelfRoute& sr,
             const internal::FusedPlan& pl, bool one_mul, void* stream) {
  return int(internal::LaunchFusedLab(g, d, sr, pl, one_mul, static_cast<cudaStream_t>(stream)));
}

int LabWgmma(const internal::GemmArgs& a, bool gate_up, bool one_mul, int bn, int max_tiles, bool persist,
             void* stream) {
  return internal::LaunchWgmmaTmaLab(a, gate_up, one_mul, bn, max_tiles, persist, static_cast<cudaStream_t>(stream));
}

// The lab's launchers, reachable from the production dispatch.
void SetLabHooks(internal::Variant& v) {
  v.lab_gemm = LabGemm;
  v.lab_kst = LabKst;
  v.lab_pair = LabPair;
  v.lab_wgmma = LabWgmma;
  v.lab_fused = LabFused;
  v.lab_fused_stamps = internal::FusedStampsReportLab;
}

}  // namespace

absl::Status ApplyPlanOption(std::string_view spec) {
  absl::StatusOr<internal::Variant> v = ParsePlanOption(spec);
  if (!v.ok()) return v.status();
  SetLabHooks(*v);
  internal::SetVariant(*v);
  return absl::OkStatus();
}

void PinPath(int spec) {
  internal::Variant v = internal::CurrentVariant();
  v.forced_spec = spec < 0 ? -1 : spec;
  SetLabHooks(v);
  internal::SetVariant(v);
}

int PinnedPath() { return internal::CurrentVariant().forced_spec; }

bool Unpinned() {
  const internal::Variant& v = internal::CurrentVariant();
  return v.forced_spec < 0 && v.decode_pin == 0;
}

bool FusedOn() { return !internal::CurrentVariant().fused.off; }

bool PairedCostWeighed() {
  const internal::Variant& v = internal::CurrentVariant();
  if (v.kst_pair == 0 || !internal::KstDefault()) return false;
  return v.paired_cost != 0 ? v.paired_cost == 1 : internal::PairedCostHolds(internal::Device().peak_gbps);
}

}  // namespace mxserve::kernels::cuda::lab
