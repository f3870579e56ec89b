#include "coordinator/device_choice.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

#ifdef MXSERVE_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace mxserve {

std::string DeviceChoice::ToString() const {
  return gpu ? absl::StrCat("cuda:", ordinal) : "cpu";
}

absl::StatusOr<DeviceChoice> ChooseDevice(absl::string_view spec, int gpu_count, bool cuda_built) {
  if (spec == "auto") {
    if (gpu_count > 0) return DeviceChoice{true, 0};
    return DeviceChoice{false, 0};
  }
  if (spec == "cpu") return DeviceChoice{false, 0};
  int n = 0;
  if (spec == "cuda") {
    n = 0;
  } else if (spec.substr(0, 5) != "cuda:" || spec.size() == 5 || spec.size() > 9 ||
             !std::all_of(spec.begin() + 5, spec.end(), absl::ascii_isdigit) ||
             !absl::SimpleAtoi(spec.substr(5), &n)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--device ", spec, ": expected auto, cpu, cuda or cuda:N"));
  }
  if (!cuda_built) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--device ", spec, ": this build has no CUDA (built without nvcc); use --device cpu"));
  }
  if (n >= gpu_count) {
    return absl::InvalidArgumentError(absl::StrCat("--device ", spec, ": this process sees ",
                                                   gpu_count, " CUDA device(s)"));
  }
  return DeviceChoice{true, n};
}

int VisibleGpuCount() {
#ifdef MXSERVE_HAVE_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // no driver or no device: not sticky, clear it
    return 0;
  }
  return n;
#else
  return 0;
#endif
}

}  // namespace mxserve
