// What the bench and the GPU check use beyond the production API: the MXSERVE_PLAN option
// applied to the process (plan_option.h), and per-row pins.
#pragma once

#include <string_view>

#include "absl/status/status.h"

namespace mxserve::kernels::cuda::lab {

// Parses `spec` (ParsePlanOption) and puts it in force for the process, with the lab's GEMMs
// reachable (Variant::lab_gemm). Call before the first MoeForwardCuda.
absl::Status ApplyPlanOption(std::string_view spec);
// kAuto pinned to a path spec (moe_cuda_plan.h: SpecNamed), -1 unpinned; the rest of the option
// stays in force.
void PinPath(int spec);
int PinnedPath();
// Whether the pin in force leaves kAuto's choice alone (no path and no decode kernel pinned).
bool Unpinned();
// Whether the fused layer may run (not fused=off).
bool FusedOn();
// Whether kAuto weighs the paired launch's cost on this card.
bool PairedCostWeighed();

}  // namespace mxserve::kernels::cuda::lab
