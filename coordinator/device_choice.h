// Where the coordinator's dense model runs: --device auto (the first GPU if the host has one,
// else the CPU), cpu, or cuda:N.
#pragma once

#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/statusor.h"

namespace mxserve {

struct DeviceChoice {
  bool gpu = false;
  int ordinal = 0;  // the N of cuda:N when gpu
  std::string ToString() const;
};

// spec: "auto", "cpu", "cuda" (= cuda:0) or "cuda:N"; gpu_count: the CUDA devices this process
// sees. InvalidArgument naming the flag for anything else, for cuda:N with N >= gpu_count, and
// for a GPU in a build without CUDA (gpu_count is then 0 and the message says so).
absl::StatusOr<DeviceChoice> ChooseDevice(absl::string_view spec, int gpu_count, bool cuda_built);

// CUDA devices visible to this process (CUDA_VISIBLE_DEVICES applies); 0 without a driver, a
// device, or a CUDA build.
int VisibleGpuCount();

}  // namespace mxserve
