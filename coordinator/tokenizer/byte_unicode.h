// GPT-2's reversible byte <-> unicode map (`bytes_to_unicode`), the alphabet in which byte-level
// BPE vocabularies (tokenizer.json "vocab" keys and "merges") spell raw bytes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace mxserve {

// The code point GPT-2 assigns to byte b (printable Latin-1 bytes map to themselves, the rest to
// U+0100 and up, in byte order).
char32_t ByteToUnicode(uint8_t b);

// Raw bytes -> their byte-level unicode spelling, as UTF-8.
std::string BytesToByteLevel(std::string_view bytes);

// Inverse of BytesToByteLevel. Error when `s` is not UTF-8 or holds a code point outside the map.
absl::StatusOr<std::string> ByteLevelToBytes(std::string_view s);

// Appends code point cp as UTF-8.
void AppendUtf8(char32_t cp, std::string* out);

}  // namespace mxserve
