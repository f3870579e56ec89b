#include "coordinator/supervision/worker_devices.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/visible_gpus.h"

namespace mxserve {
namespace {

constexpr absl::string_view kCuda = "cuda:";
constexpr int kMaxOrdinal = 1 << 16;  // far above any host; keeps the digits' value an int

// The N of "cuda:N" (digits only), or -1 when s is not that.
int CudaOrdinal(absl::string_view s) {
  if (s.substr(0, kCuda.size()) != kCuda) return -1;
  const absl::string_view digits = s.substr(kCuda.size());
  if (digits.empty() || digits.size() > 6 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return absl::ascii_isdigit(c); })) {
    return -1;
  }
  int n = -1;
  return absl::SimpleAtoi(digits, &n) && n < kMaxOrdinal ? n : -1;
}

std::string Cuda(int ordinal) { return absl::StrCat(kCuda, ordinal); }

}  // namespace

HostGpus HostGpus::ForThisProcess(int runtime_gpus, int coordinator_gpu) {
  HostGpus h;
  h.cuda_build = BuiltWithCuda();
  h.visible = h.cuda_build ? runtime_gpus : CountVisibleGpus(GpuProbe::FromEnvironment());
  h.coordinator = coordinator_gpu >= 0 && coordinator_gpu < h.visible ? coordinator_gpu : -1;
  return h;
}

std::string HostGpus::ToString() const {
  if (visible <= 0) return "no GPU visible";
  if (!cuda_build) {
    return absl::StrCat(visible, " GPU(s) on this host, none for the workers: this build has no CUDA");
  }
  return absl::StrCat(visible, " GPU(s) visible, the coordinator on ",
                      coordinator >= 0 ? Cuda(coordinator) : "cpu");
}

absl::StatusOr<std::vector<std::string>> ParseWorkerDevices(absl::string_view list) {
  std::vector<std::string> out;
  int index = 0;
  for (absl::string_view e : absl::StrSplit(list, ',')) {
    e = absl::StripAsciiWhitespace(e);
    if (e == "cpu") {
      out.emplace_back(e);
    } else if (const int n = CudaOrdinal(e); n >= 0) {
      out.push_back(Cuda(n));
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "--worker-devices: entry ", index, " ('", e, "') is not cpu or cuda:N (N = 0, 1, ...)"));
    }
    ++index;
  }
  return out;
}

std::vector<std::string> DefaultWorkerDevices(const HostGpus& host) {
  if (!host.cuda_build || host.visible <= 0) return {"cpu"};
  std::vector<std::string> out;
  for (int g = 0; g < host.visible; ++g) {
    if (g != host.coordinator) out.push_back(Cuda(g));
  }
  if (out.empty()) out.push_back(Cuda(host.coordinator));  // its only GPU: shared
  return out;
}

absl::StatusOr<std::vector<std::string>> AssignWorkerDevices(
    const std::vector<std::string>& requested, int num_workers, const HostGpus& host) {
  for (const std::string& d : requested) {
    const int n = CudaOrdinal(d);
    if (n < 0 && d != "cpu") {
      return absl::InvalidArgumentError(
          absl::StrCat("--worker-devices: '", d, "' is not cpu or cuda:N"));
    }
    if (n >= 0 && !host.cuda_build) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--worker-devices: ", d, ": this build has no CUDA support (its workers run on cpu)"));
    }
    if (n >= host.visible) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--worker-devices: ", d, ": this host shows ", host.visible, " GPU(s)",
          host.visible > 0 ? absl::StrCat(" (cuda:0..cuda:", host.visible - 1, ")") : "",
          "; CUDA_VISIBLE_DEVICES decides which"));
    }
  }
  const std::vector<std::string> devices =
      requested.empty() ? DefaultWorkerDevices(host) : requested;
  std::vector<std::string> out;
  for (int i = 0; i < num_workers; ++i) out.push_back(devices[i % devices.size()]);
  return out;
}

}  // namespace mxserve
