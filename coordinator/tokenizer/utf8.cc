#include "coordinator/tokenizer/utf8.h"

#include <cstdint>

namespace mxserve {
namespace {

constexpr char kReplacement[] = "\xEF\xBF\xBD";

// For a lead byte: total sequence length (0 = invalid lead) and the range of the second byte.
struct Lead {
  int len;
  uint8_t lo, hi;
};

Lead LeadInfo(uint8_t c) {
  if (c < 0x80) return {1, 0, 0};
  if (c < 0xC2) return {0, 0, 0};
  if (c < 0xE0) return {2, 0x80, 0xBF};
  if (c == 0xE0) return {3, 0xA0, 0xBF};
  if (c == 0xED) return {3, 0x80, 0x9F};
  if (c < 0xF0) return {3, 0x80, 0xBF};
  if (c == 0xF0) return {4, 0x90, 0xBF};
  if (c < 0xF4) return {4, 0x80, 0xBF};
  if (c == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

}  // namespace

size_t AppendUtf8Lossy(std::string_view s, std::string* out, bool hold_incomplete) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    size_t run = i;
    while (run < n && p[run] < 0x80) ++run;  // ASCII fast path
    if (run > i) {
      out->append(s.data() + i, run - i);
      i = run;
      if (i == n) break;
    }
    Lead L = LeadInfo(p[i]);
    if (L.len == 0) {
      out->append(kReplacement);
      ++i;
      continue;
    }
    size_t k = 1;  // bytes of the sequence that fit so far
    while (k < static_cast<size_t>(L.len) && i + k < n) {
      uint8_t b = p[i + k];
      bool ok = (k == 1) ? (b >= L.lo && b <= L.hi) : (b >= 0x80 && b <= 0xBF);
      if (!ok) break;
      ++k;
    }
    if (k == static_cast<size_t>(L.len)) {
      out->append(s.data() + i, k);
      i += k;
    } else if (i + k == n && hold_incomplete) {
      return i;  // a valid prefix cut by the end: wait for more bytes
    } else {
      out->append(kReplacement);
      i += k;
    }
  }
  return n;
}

bool IsValidUtf8(std::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const size_t n = s.size();
  size_t i = 0;
  while (i < n) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    Lead L = LeadInfo(p[i]);
    if (L.len == 0 || i + L.len > n) return false;
    if (p[i + 1] < L.lo || p[i + 1] > L.hi) return false;
    for (int k = 2; k < L.len; ++k)
      if (p[i + k] < 0x80 || p[i + k] > 0xBF) return false;
    i += L.len;
  }
  return true;
}

}  // namespace mxserve
