// How many GPUs this host gives this process, counted without the CUDA runtime: a coordinator
// built without CUDA says so when its local workers leave the host's GPUs idle.
#pragma once

#include <optional>
#include <string>

namespace mxserve {

// What the count is made of; tests fill it in, FromEnvironment reads this process's.
struct GpuProbe {
  std::optional<std::string> cuda_visible_devices;  // the variable's value; nullopt: unset
  std::string dev_dir = "/dev";                       // where the nvidiaN device nodes are
  static GpuProbe FromEnvironment();
};

// The nvidiaN character devices under dev_dir (nvidia0, nvidia1, ...; not nvidiactl or
// nvidia-uvm): a container sees only the GPUs given to it. When CUDA_VISIBLE_DEVICES is set, at
// most its entries up to the first that names no device, as the CUDA runtime reads it (an index
// >= 0 or a GPU-/MIG- UUID; "" and "-1" hide every GPU). The GPUs are cuda:0 .. cuda:count-1.
int CountVisibleGpus(const GpuProbe& probe);

// Whether the binaries of this build run kernels on a GPU (compiled with MXSERVE_HAVE_CUDA).
bool BuiltWithCuda();

}  // namespace mxserve
