// A chat prompt under construction: the template's own text (which may hold its special-token
// markers) and text taken from the request (message content, names, ids, arguments), kept
// apart so that request text never becomes a control token when the prompt is tokenized.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace mxserve {

class Tokenizer;

class PromptBuilder {
 public:
  // markers: the template's special-token strings with their ids (resolved from the tokenizer).
  explicit PromptBuilder(const std::vector<std::pair<std::string, int32_t>>* markers)
      : markers_(markers) {}

  void Markup(std::string_view s) { text_.append(s); }  // template text
  void Text(std::string_view s) {                       // request text: always ordinary
    if (s.empty()) return;
    spans_.push_back({text_.size(), text_.size() + s.size()});
    text_.append(s);
  }
  const std::string& text() const { return text_; }
  std::string Take() { return std::move(text_); }

  // Markers found in template text become their ids; every run between two markers (template
  // and request text alike) is encoded as one ordinary run, as HF's whole-string encoding does.
  // Equals tok.Encode(text(), true) unless request text spells a marker.
  std::vector<int32_t> Encode(const Tokenizer& tok) const;

 private:
  const std::vector<std::pair<std::string, int32_t>>* markers_;
  std::string text_;
  std::vector<std::pair<size_t, size_t>> spans_;  // [begin, end) of request text, in order
};

// The ids of a template's markers; InvalidArgument "<format> chat template: the tokenizer has
// no <marker> token" for the first one missing (or no tokenizer at all).
absl::StatusOr<std::vector<std::pair<std::string, int32_t>>> ResolveMarkers(
    const Tokenizer* tok, std::string_view format, const std::vector<std::string>& markers);

}  // namespace mxserve
