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

}  // namespace

absl::Status ApplyPlanOption(std::string_view spec) {
  absl::StatusOr<internal::Variant> v = ParsePlanOption(spec);
  if (!v.ok()) return v.status();
  v->lab_gemm = LabGemm;
  internal::SetVariant(*v);
  return absl::OkStatus();
}

void PinPath(int spec) {
  internal::Variant v = internal::CurrentVariant();
  v.forced_spec = spec < 0 ? -1 : spec;
  v.lab_gemm = LabGemm;
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
