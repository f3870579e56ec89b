// Constant-time equality for secrets (API keys, worker tokens): the time taken depends only on
// the lengths, never on where the first differing byte is, so a timing probe learns nothing.
#pragma once

#include <cstddef>
#include <string_view>

namespace mxserve {

inline bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  // Compare against b over a's length whatever b's length is, then fold the length check in,
  // so a wrong-length guess costs the same as a wrong-content one.
  volatile unsigned char diff = static_cast<unsigned char>(a.size() != b.size());
  const size_t n = a.size();
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = static_cast<unsigned char>(a[i]);
    const unsigned char y = b.empty() ? 0 : static_cast<unsigned char>(b[i % b.size()]);
    diff = diff | static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

}  // namespace mxserve
