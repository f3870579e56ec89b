#include "coordinator/tokenizer/byte_unicode.h"

#include <array>

#include "absl/strings/str_cat.h"

namespace mxserve {
namespace {

struct Tables {
  std::array<char32_t, 256> to_cp{};
  std::array<int16_t, 324> from_cp{};  // code points 0..323 cover the map's image; -1 = none
  Tables() {
    from_cp.fill(-1);
    auto printable = [](int b) {
      return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    };
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      char32_t cp = printable(b) ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      to_cp[b] = cp;
      from_cp[cp] = static_cast<int16_t>(b);
    }
  }
};

const Tables& T() {
  static const Tables* t = new Tables();
  return *t;
}

}  // namespace

char32_t ByteToUnicode(uint8_t b) { return T().to_cp[b]; }

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string BytesToByteLevel(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) AppendUtf8(T().to_cp[c], &out);
  return out;
}

absl::StatusOr<std::string> ByteLevelToBytes(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    char32_t cp;
    if (c < 0x80) {
      cp = c;
      i += 1;
    } else if ((c & 0xE0) == 0xC0 && i + 1 < s.size() &&
               (static_cast<unsigned char>(s[i + 1]) & 0xC0) == 0x80) {
      cp = (static_cast<char32_t>(c & 0x1F) << 6) | (static_cast<unsigned char>(s[i + 1]) & 0x3F);
      i += 2;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("byte-level token '", std::string(s), "' holds a character outside GPT-2's byte map"));
    }
    if (cp >= T().from_cp.size() || T().from_cp[cp] < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("byte-level token '", std::string(s), "' holds U+", absl::Hex(cp),
                       ", outside GPT-2's byte map"));
    }
    out.push_back(static_cast<char>(T().from_cp[cp]));
  }
  return out;
}

}  // namespace mxserve
