// libFuzzer target: config.json parsing (core/model_config.cc ModelConfig::FromJsonText). An
// accepted config must be self-consistent enough for the loaders that size buffers from it.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto c = mxserve::ModelConfig::FromJsonText(text);
  if (!c.ok()) return 0;
  if (c->num_hidden_layers <= 0 || c->hidden_size <= 0 || c->num_local_experts <= 0 ||
      c->intermediate_size <= 0) {
    abort();
  }
  return 0;
}
