// The built-in training text of the tiny tokenizer: a few KB of English prose, code, numbers and
// a little CJK / emoji, fixed forever so that the tokenizer (and every tiny checkpoint) is
// reproducible.
#pragma once

#include <string_view>

namespace mxserve {

std::string_view TinyTokenizerCorpus();

}  // namespace mxserve
