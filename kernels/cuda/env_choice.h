// The CUDA path's benchmark switches (MXSERVE_CUDA_MOE_*): environment variables that pin a
// kernel configuration so that bench/ and tests/gpu/run_all.sh can time one against another.
// Plain C++ (tested on the CPU); private to kernels/cuda.
#pragma once

#include <initializer_list>
#include <string_view>

namespace mxserve::kernels::cuda::internal {

// The position of environment variable `name`'s value in `values`. Unset, empty, or the first
// entry ("default", which tests/gpu/run_all.sh passes for "the code's own choice") is 0. Any
// other value is reported on stderr, naming the variable and the accepted values, and also
// means 0: a typo in a pinned benchmark must not pass for a measurement of what it names.
int EnvChoice(const char* name, std::initializer_list<std::string_view> values);

}  // namespace mxserve::kernels::cuda::internal
