#include "kernels/cuda/env_choice.h"

#include <cstdio>
#include <cstdlib>
#include <string>

namespace mxserve::kernels::cuda::internal {

int EnvChoice(const char* name, std::initializer_list<std::string_view> values) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return 0;
  int i = 0;
  for (std::string_view s : values) {
    if (s == v) return i;
    ++i;
  }
  std::string names;
  for (std::string_view s : values) names.append(names.empty() ? "" : ", ").append(s);
  std::fprintf(stderr, "mxserve: %s=%s is not one of %s; the default runs\n", name, v, names.c_str());
  return 0;
}

}  // namespace mxserve::kernels::cuda::internal
