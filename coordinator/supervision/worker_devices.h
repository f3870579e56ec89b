// Which device each local worker (--local-workers) runs its experts on: --worker-devices, or by
// default the GPUs of this host the coordinator leaves free. Parsed and checked before any
// worker starts; the pool then gives worker i the same device on every (re)start.
#pragma once

#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"

namespace mxserve {

// The GPUs of this host as the coordinator sees them.
struct HostGpus {
  int visible = 0;          // cuda:0 .. cuda:visible-1
  int coordinator = -1;     // the GPU the coordinator's dense model uses; -1: its CPU
  bool cuda_build = false;  // the workers of this build can run on a GPU (BuiltWithCuda)
  // This process's view. With CUDA, visible is runtime_gpus: the CUDA runtime's count, the one
  // --device was checked against, so both follow one rule. Without CUDA no worker can use a GPU,
  // and visible counts the device nodes (CountVisibleGpus) only so that the log can say why
  // the host's GPUs stay idle. coordinator: coordinator_gpu when visible, else -1.
  static HostGpus ForThisProcess(int runtime_gpus, int coordinator_gpu);
  // For the log: "2 GPU(s) visible, the coordinator on cuda:0", "no GPU visible", or "4 GPU(s)
  // on this host, none for the workers: this build has no CUDA".
  std::string ToString() const;
};

// "cuda:0,cuda:1" or "cpu" (spaces around entries allowed) → its entries, cuda:N written
// without leading zeros. An empty entry, or one that is neither cpu nor cuda:N, is an
// InvalidArgument naming it.
absl::StatusOr<std::vector<std::string>> ParseWorkerDevices(absl::string_view list);

// The devices when --worker-devices is not given: every visible GPU except the coordinator's;
// the coordinator's when it is the only one (the workers share it); cpu when this host shows
// no GPU or the build has no CUDA.
std::vector<std::string> DefaultWorkerDevices(const HostGpus& host);

// Worker i's device for i in [0, num_workers): devices[i % size], devices being `requested`
// (entries of ParseWorkerDevices) or, when it is empty, DefaultWorkerDevices(host). A requested
// GPU the host does not show, or any GPU in a build without CUDA, is an InvalidArgument naming
// the entry.
absl::StatusOr<std::vector<std::string>> AssignWorkerDevices(
    const std::vector<std::string>& requested, int num_workers, const HostGpus& host);

}  // namespace mxserve
