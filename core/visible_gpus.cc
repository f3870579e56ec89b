#include "core/visible_gpus.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include "absl/strings/string_view.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"

namespace mxserve {

GpuProbe GpuProbe::FromEnvironment() {
  GpuProbe p;
  if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES"); v != nullptr) p.cuda_visible_devices = v;
  return p;
}

namespace {

bool AllDigits(absl::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return absl::ascii_isdigit(c); });
}

// Entries of CUDA_VISIBLE_DEVICES before the first that names no device.
int CountListed(absl::string_view list) {
  int n = 0;
  for (absl::string_view e : absl::StrSplit(list, ',')) {
    e = absl::StripAsciiWhitespace(e);
    if (!AllDigits(e) && !absl::StartsWith(e, "GPU-") && !absl::StartsWith(e, "MIG-")) break;
    ++n;
  }
  return n;
}

int CountDeviceNodes(const std::string& dev_dir) {
  std::error_code ec;
  int n = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dev_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!absl::StartsWith(name, "nvidia") || !AllDigits(absl::string_view(name).substr(6))) continue;
    struct stat st {};
    if (stat(entry.path().c_str(), &st) == 0 && S_ISCHR(st.st_mode)) ++n;
  }
  return n;
}

}  // namespace

int CountVisibleGpus(const GpuProbe& probe) {
  const int nodes = CountDeviceNodes(probe.dev_dir);
  if (!probe.cuda_visible_devices.has_value()) return nodes;
  return std::min(nodes, CountListed(*probe.cuda_visible_devices));
}

bool BuiltWithCuda() {
#ifdef MXSERVE_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

}  // namespace mxserve
