// Compiles a regular expression (the subset guided_regex supports) into a Grammar rule that
// matches whole strings. Supported: literals (UTF-8 passes through), '.', character classes
// [...] / [^...] with ASCII members and ranges, escapes \d \D \w \W \s \S \n \r \t \f \v \0
// \xHH and escaped punctuation, groups (...) (?:...) (?<name>...) (?P<name>...), alternation |,
// quantifiers * + ? {n} {n,} {n,m} (lazy/possessive suffixes match the same strings), and ^ / $
// at the very start / end. Everything else (backreferences, lookaround, \b, non-ASCII class
// members, inline flags) is refused with InvalidArgument naming the construct.
#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"
#include "coordinator/grammar/grammar.h"

namespace mxserve::grammar {

// Adds a rule named `name` matching exactly the strings `pattern` matches; returns its id.
absl::StatusOr<int32_t> CompileRegexRule(std::string_view pattern, std::string_view name,
                                         Grammar* grammar);

}  // namespace mxserve::grammar
