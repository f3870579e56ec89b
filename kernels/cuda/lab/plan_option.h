// The one benchmark option of the CUDA path: MXSERVE_PLAN="key=value,key=value", read by the
// bench's and the GPU check's main only, parsed here into the experiment settings
// (moe_cuda_variant.h). Plain C++ (plan_option_test.cc). README.md here lists the keys.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "kernels/cuda/moe_cuda_variant.h"

namespace mxserve::kernels::cuda::lab {

// The settings `spec` names on top of the defaults; an empty spec is the defaults. A key or
// value that is not one of the listed ones is an InvalidArgument error naming it and the
// accepted values (a typo must not pass for a measurement of what it names). "default" is
// accepted for every key.
absl::StatusOr<internal::Variant> ParsePlanOption(std::string_view spec);

// The keys and their values, one line each (the bench prints it on a bad option).
std::string PlanOptionHelp();

}  // namespace mxserve::kernels::cuda::lab
