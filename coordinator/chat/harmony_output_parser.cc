#include "coordinator/chat/harmony_output_parser.h"

namespace mxserve {
namespace {

// The word after `key` in a header, up to whitespace or the next special token.
std::string WordAfter(const std::string& header, const std::string& key) {
  size_t p = header.find(key);
  if (p == std::string::npos) return "";
  p += key.size();
  size_t e = p;
  while (e < header.size() && header[e] != ' ' && header[e] != '\t' && header[e] != '\n' &&
         header.compare(e, 2, "<|") != 0)
    ++e;
  return header.substr(p, e - p);
}

}  // namespace

HarmonyOutputParser::HarmonyOutputParser(const Tokenizer* tok, HarmonyTokens t)
    : tok_(tok), t_(t) {}

void HarmonyOutputParser::Emit(const std::string& text, Delta* d) {
  if (text.empty()) return;
  switch (route_) {
    case Route::kContent: d->content += text; break;
    case Route::kReasoning: d->reasoning += text; break;
    case Route::kToolCall:
      if (!d->tool_calls.empty() && d->tool_calls.back().index == tool_calls_ - 1) {
        d->tool_calls.back().arguments += text;
      } else {
        d->tool_calls.push_back({tool_calls_ - 1, "", text});
      }
      break;
  }
}

// Header complete (at <|message|>): decide where the body goes.
void HarmonyOutputParser::StartBody(Delta* d) {
  const std::string channel = WordAfter(header_, "<|channel|>");
  const std::string recipient = WordAfter(header_, "to=");
  if (recipient.rfind("functions.", 0) == 0) {
    route_ = Route::kToolCall;
    d->tool_calls.push_back({tool_calls_, recipient.substr(10), ""});
    ++tool_calls_;
  } else if (channel == "analysis" || !recipient.empty()) {
    // Built-in tools (browser.*, python) are called from the analysis channel: reasoning.
    route_ = Route::kReasoning;
  } else {
    route_ = Route::kContent;  // final, commentary preambles, and a missing channel
  }
  header_.clear();
  header_ids_.clear();
  header_has_special_ = false;
  detok_.emplace(tok_, /*skip_special=*/true);
  where_ = Where::kBody;
}

void HarmonyOutputParser::EndBody(Delta* d) {
  if (detok_) Emit(detok_->Flush(), d);
  detok_.reset();
}

void HarmonyOutputParser::Prime(const std::vector<int32_t>& ids) {
  for (int32_t id : ids) {
    Delta d = Push(id);  // starts from pending_, so nothing is lost
    pending_ = std::move(d);
  }
}

ChatOutputParser::Delta HarmonyOutputParser::Push(int32_t id) {
  Delta d = std::move(pending_);
  pending_ = Delta();
  if (where_ == Where::kDone) return d;
  if (id == t_.ret || id == t_.call) {
    EndBody(&d);
    where_ = Where::kDone;
    return d;
  }
  if (id == t_.end) {
    EndBody(&d);
    header_.clear();
    header_ids_.clear();
    header_has_special_ = false;
    where_ = Where::kHeader;
    return d;
  }
  if (id == t_.start) {  // a new message (the model may skip <|end|>)
    EndBody(&d);
    header_.clear();
    header_ids_.clear();
    header_has_special_ = true;  // what follows is a role: never content
    where_ = Where::kHeader;
    return d;
  }
  if (where_ == Where::kHeader) {
    if (id == t_.message) {
      StartBody(&d);
      return d;
    }
    if (id == t_.channel || id == t_.constrain) {
      header_ += id == t_.channel ? "<|channel|>" : " <|constrain|>";
      header_has_special_ = true;
      return d;
    }
    if (tok_->IsSpecial(id)) return d;
    auto bytes = tok_->DecodeBytes(std::span<const int32_t>(&id, 1), false);
    if (bytes.ok()) header_ += *bytes;
    header_ids_.push_back(id);
    if (header_.size() > kMaxHeaderBytes && !header_has_special_) {
      // Not harmony: show the text rather than swallow it.
      std::vector<int32_t> ids = std::move(header_ids_);
      route_ = Route::kContent;
      header_.clear();
      header_ids_.clear();
      detok_.emplace(tok_, true);
      where_ = Where::kBody;
      for (int32_t h : ids) Emit(detok_->Push(h), &d);
    }
    return d;
  }
  // Body.
  if (tok_->IsSpecial(id)) return d;  // stray <|channel|>, <|message|>, ...: not text
  Emit(detok_->Push(id), &d);
  return d;
}

ChatOutputParser::Delta HarmonyOutputParser::Finish() {
  Delta d = std::move(pending_);
  pending_ = Delta();
  if (where_ == Where::kBody) {
    EndBody(&d);
  } else if (where_ == Where::kHeader && !header_has_special_ && !header_ids_.empty()) {
    // The stream ended in what was plain text, not a header: it is the model's answer.
    route_ = Route::kContent;
    IncrementalDetokenizer detok(tok_, true);
    for (int32_t h : header_ids_) Emit(detok.Push(h), &d);
    Emit(detok.Flush(), &d);
  }
  header_ids_.clear();
  header_.clear();
  where_ = Where::kDone;
  return d;
}

}  // namespace mxserve
