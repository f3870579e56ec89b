// libFuzzer target: the safetensors header parser (core/safetensors.cc SafetensorsFile::Open)
// on arbitrary file contents, through an in-memory file (memfd) so no disk is touched. Every
// tensor it accepts must lie inside the file and match its dtype and shape.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const int fd = memfd_create("fuzz_safetensors", MFD_CLOEXEC);
  if (fd < 0) abort();
  if (ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) abort();
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  auto file = mxserve::SafetensorsFile::Open(path);
  if (!file.ok()) return 0;
  for (const auto& [name, t] : (*file)->tensors()) {
    if (t.nbytes > size) abort();
    // Touch the first and last byte: ASan reports a view that points outside the mapping.
    if (t.nbytes > 0) {
      volatile uint8_t first = t.data[0];
      volatile uint8_t last = t.data[t.nbytes - 1];
      (void)first;
      (void)last;
    }
    if (t.numel() < 0) abort();
  }
  return 0;
}
