#include "coordinator/tokenizer/bpe_tokenizer.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "coordinator/tokenizer/utf8.h"

namespace mxserve {

absl::StatusOr<std::unique_ptr<BpeTokenizer>> BpeTokenizer::Create(BpeTokenizerParts parts) {
  // Ids index the decode tables (one entry per id up to the largest): a file naming a stray
  // huge id is refused rather than allocated for. 2^24 is far past every real vocabulary
  // (o200k_harmony 201,088; Kimi 163,840).
  constexpr int32_t kMaxId = (1 << 24) - 1;
  for (const auto& [bytes, id] : parts.bpe.vocab()) {
    if (id < 0 || id > kMaxId) {
      return absl::InvalidArgumentError(
          absl::StrCat("vocab token id ", id, " is outside [0, ", kMaxId, "]"));
    }
  }
  for (const AddedToken& t : parts.added) {
    if (t.id < 0) return absl::InvalidArgumentError(absl::StrCat("added token id ", t.id, " < 0"));
    if (t.id > kMaxId) {
      return absl::InvalidArgumentError(absl::StrCat("added token id ", t.id, " > ", kMaxId));
    }
    if (t.content.empty())
      return absl::InvalidArgumentError(absl::StrCat("added token ", t.id, " has empty content"));
  }
  return std::unique_ptr<BpeTokenizer>(new BpeTokenizer(std::move(parts)));
}

BpeTokenizer::BpeTokenizer(BpeTokenizerParts parts)
    : bpe_(std::move(parts.bpe)),
      splitters_(std::move(parts.splitters)),
      add_prefix_space_(parts.add_prefix_space),
      added_(std::move(parts.added)),
      bos_(parts.bos),
      eos_(parts.eos),
      prompt_prefix_(std::move(parts.prompt_prefix)),
      prompt_suffix_(std::move(parts.prompt_suffix)) {
  int32_t max_id = -1;
  for (const auto& [s, id] : bpe_.vocab()) max_id = std::max(max_id, id);
  for (const AddedToken& t : added_) max_id = std::max(max_id, t.id);
  bytes_.resize(static_cast<size_t>(max_id + 1));
  kind_.assign(static_cast<size_t>(max_id + 1), 0);
  for (const auto& [s, id] : bpe_.vocab()) {
    bytes_[id] = s;
    kind_[id] = 1;
  }
  // An id named twice (tiktoken's o200k_harmony calls 200018 both <|endofprompt|> and
  // <|reserved_200018|>) decodes as its first name; both names encode to it.
  std::vector<bool> named(kind_.size(), false);
  for (const AddedToken& t : added_) {
    if (named[t.id]) continue;
    named[t.id] = true;
    bytes_[t.id] = t.content;
    kind_[t.id] = t.special ? 3 : 2;
  }
  std::stable_sort(added_.begin(), added_.end(), [](const AddedToken& a, const AddedToken& b) {
    return a.content.size() > b.content.size();
  });
  for (const AddedToken& t : added_) {
    by_first_byte_[static_cast<uint8_t>(t.content[0])].push_back(&t);
    by_content_.try_emplace(t.content, t.id);
  }
}

void BpeTokenizer::EncodeOrdinary(std::string_view text, std::vector<int32_t>* out) const {
  if (text.empty()) return;
  std::string prefixed;
  if (add_prefix_space_ && text[0] != ' ') {
    prefixed = absl::StrCat(" ", absl::string_view(text.data(), text.size()));
    text = prefixed;
  }
  std::vector<std::string_view> pieces{text}, next;
  for (const auto& s : splitters_) {
    next.clear();
    next.reserve(pieces.size());
    for (std::string_view p : pieces) s->Split(p, &next);
    pieces.swap(next);
  }
  out->reserve(out->size() + text.size() / 3);
  for (std::string_view p : pieces) bpe_.Encode(p, out);
}

std::vector<int32_t> BpeTokenizer::EncodeOrdinary(std::string_view text) const {
  std::vector<int32_t> out;
  EncodeOrdinary(text, &out);
  return out;
}

std::vector<int32_t> BpeTokenizer::Encode(std::string_view text, bool allow_special) const {
  std::vector<int32_t> out;
  if (added_.empty()) {
    EncodeOrdinary(text, &out);
    return out;
  }
  size_t seg = 0;  // start of ordinary text not yet encoded
  size_t i = 0;
  while (i < text.size()) {
    const auto& candidates = by_first_byte_[static_cast<uint8_t>(text[i])];
    const AddedToken* hit = nullptr;
    for (const AddedToken* t : candidates) {  // longest first
      if (t->special && !allow_special) continue;
      if (text.compare(i, t->content.size(), t->content) == 0) {
        hit = t;
        break;
      }
    }
    if (hit == nullptr) {
      ++i;
      continue;
    }
    EncodeOrdinary(text.substr(seg, i - seg), &out);
    out.push_back(hit->id);
    i += hit->content.size();
    seg = i;
  }
  EncodeOrdinary(text.substr(seg), &out);
  return out;
}

absl::StatusOr<std::string> BpeTokenizer::DecodeBytes(std::span<const int32_t> ids,
                                                      bool skip_special) const {
  std::string out;
  for (size_t k = 0; k < ids.size(); ++k) {
    int32_t id = ids[k];
    if (id < 0 || static_cast<size_t>(id) >= kind_.size() || kind_[id] == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", id, " (at position ", k, ") is not in the vocabulary of ",
                       kind_.size(), " ids"));
    }
    if (skip_special && kind_[id] == 3) continue;
    out += bytes_[id];
  }
  return out;
}

absl::StatusOr<std::string> BpeTokenizer::Decode(std::span<const int32_t> ids,
                                                 bool skip_special) const {
  auto bytes = DecodeBytes(ids, skip_special);
  if (!bytes.ok()) return bytes.status();
  std::string out;
  out.reserve(bytes->size());
  AppendUtf8Lossy(*bytes, &out, /*hold_incomplete=*/false);
  return out;
}

std::string BpeTokenizer::TokenString(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= kind_.size() || kind_[id] == 0) return "";
  std::string out;
  AppendUtf8Lossy(bytes_[id], &out, false);
  return out;
}

std::optional<int32_t> BpeTokenizer::SpecialTokenId(std::string_view content) const {
  auto it = by_content_.find(absl::string_view(content.data(), content.size()));
  if (it == by_content_.end()) return std::nullopt;
  return it->second;
}

bool BpeTokenizer::IsSpecial(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < kind_.size() && kind_[id] == 3;
}

std::vector<int32_t> BpeTokenizer::EncodePrompt(std::string_view text,
                                                bool add_special_tokens) const {
  std::vector<int32_t> ids;
  if (add_special_tokens) ids = prompt_prefix_;
  std::vector<int32_t> body = Encode(text, /*allow_special=*/true);
  ids.insert(ids.end(), body.begin(), body.end());
  if (add_special_tokens) ids.insert(ids.end(), prompt_suffix_.begin(), prompt_suffix_.end());
  return ids;
}

}  // namespace mxserve
