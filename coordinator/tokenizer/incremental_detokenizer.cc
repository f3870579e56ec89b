#include "coordinator/tokenizer/utf8.h"
#include "coordinator/tokenizer/tokenizer.h"

namespace mxserve {

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer* tok, bool skip_special)
    : tok_(tok), skip_special_(skip_special) {}

std::string IncrementalDetokenizer::Push(int32_t id) {
  auto bytes = tok_->DecodeBytes(std::span<const int32_t>(&id, 1), skip_special_);
  // An id outside the vocabulary contributes nothing (the engine only samples valid ids).
  if (!bytes.ok()) return "";
  pending_ += *bytes;
  std::string out;
  size_t used = AppendUtf8Lossy(pending_, &out, /*hold_incomplete=*/true);
  pending_.erase(0, used);
  return out;
}

std::string IncrementalDetokenizer::Flush() {
  std::string out;
  AppendUtf8Lossy(pending_, &out, /*hold_incomplete=*/false);
  pending_.clear();
  return out;
}

}  // namespace mxserve
