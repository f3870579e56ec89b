// UTF-8 checking and lossy repair shared by Decode and IncrementalDetokenizer, so that streamed
// text and whole-text decoding replace the same bytes by U+FFFD (Unicode's "maximal subpart"
// rule, as Python's errors="replace" and Rust's from_utf8_lossy do).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace mxserve {

// Appends `s` to `out` with each maximal invalid subpart replaced by U+FFFD. When
// `hold_incomplete`, a trailing sequence that is a valid but unfinished prefix is not consumed.
// Returns the number of bytes of `s` consumed.
size_t AppendUtf8Lossy(std::string_view s, std::string* out, bool hold_incomplete);

bool IsValidUtf8(std::string_view s);

}  // namespace mxserve
