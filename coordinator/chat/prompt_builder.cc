#include "coordinator/chat/prompt_builder.h"

#include "absl/strings/str_cat.h"
#include "coordinator/tokenizer/tokenizer.h"

namespace mxserve {

absl::StatusOr<std::vector<std::pair<std::string, int32_t>>> ResolveMarkers(
    const Tokenizer* tok, std::string_view format, const std::vector<std::string>& markers) {
  if (tok == nullptr) return absl::InvalidArgumentError(absl::StrCat(std::string(format), " chat template: no tokenizer"));
  std::vector<std::pair<std::string, int32_t>> out;
  for (const std::string& m : markers) {
    auto id = tok->SpecialTokenId(m);
    if (!id) {
      return absl::InvalidArgumentError(
          absl::StrCat(std::string(format), " chat template: the tokenizer has no ", m, " token"));
    }
    out.push_back({m, *id});
  }
  return out;
}

std::vector<int32_t> PromptBuilder::Encode(const Tokenizer& tok) const {
  std::vector<int32_t> ids;
  const std::string_view text(text_);
  auto flush = [&](size_t from, size_t to) {
    if (to <= from) return;
    auto part = tok.Encode(text.substr(from, to - from), /*allow_special=*/false);
    ids.insert(ids.end(), part.begin(), part.end());
  };
  size_t run = 0, span = 0;
  for (size_t i = 0; i < text.size();) {
    while (span < spans_.size() && spans_[span].second <= i) ++span;
    if (span < spans_.size() && spans_[span].first <= i) {
      i = spans_[span].second;  // request text: never a marker
      continue;
    }
    // A marker lies wholly in template text: it may not run on into request text.
    const size_t limit = span < spans_.size() ? spans_[span].first : text.size();
    const std::pair<std::string, int32_t>* hit = nullptr;
    for (const auto& m : *markers_) {
      if (m.first.size() <= limit - i && text.compare(i, m.first.size(), m.first) == 0 &&
          (hit == nullptr || m.first.size() > hit->first.size()))
        hit = &m;
    }
    if (hit == nullptr) {
      ++i;
      continue;
    }
    flush(run, i);
    ids.push_back(hit->second);
    i += hit->first.size();
    run = i;
  }
  flush(run, text.size());
  return ids;
}

}  // namespace mxserve
