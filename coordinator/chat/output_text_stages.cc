#include "coordinator/chat/output_text_stages.h"

#include <algorithm>

namespace mxserve {

std::string_view StripPySpace(std::string_view s) {
  while (!s.empty() && IsPyAsciiSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsPyAsciiSpace(s.back())) s.remove_suffix(1);
  return s;
}

size_t PartialMarkerTail(std::string_view text, const std::vector<std::string_view>& markers) {
  size_t best = 0;
  for (std::string_view m : markers) {
    for (size_t n = std::min(text.size(), m.size() - 1); n > best; --n) {
      if (text.substr(text.size() - n) == m.substr(0, n)) {
        best = n;
        break;
      }
    }
  }
  return best;
}

}  // namespace mxserve
