#include "coordinator/chat/kimi_k2_output_parser.h"

#include <algorithm>

namespace mxserve {
namespace {

enum class Match { kYes, kNo, kPending };

// vLLM's pattern, from a <|tool_call_begin|> at `s` (DOTALL):
//   <|tool_call_begin|>\s*(?P<id>[^<]+:\d+)\s*<|tool_call_argument_begin|>\s*
//   (?P<args>(?:(?!<|tool_call_begin|>).)*?)\s*<|tool_call_end|>
// kPending: the text so far could still become a match.
Match MatchCall(std::string_view t, size_t s, ParsedToolCall* call, size_t* end) {
  const size_t p = s + kK2CallBegin.size();
  const size_t lt = t.find('<', p);
  if (lt == std::string_view::npos) return Match::kPending;
  std::string_view after = t.substr(lt);
  if (after.size() < kK2ArgBegin.size()) {
    return kK2ArgBegin.substr(0, after.size()) == after ? Match::kPending : Match::kNo;
  }
  if (after.substr(0, kK2ArgBegin.size()) != kK2ArgBegin) return Match::kNo;
  // The id: [^<]+ then :\d+, with \s* either side; what precedes '<' must end in ":digits".
  std::string_view head = t.substr(p, lt - p);
  while (!head.empty() && IsPyAsciiSpace(head.back())) head.remove_suffix(1);
  size_t d = head.size();
  while (d > 0 && head[d - 1] >= '0' && head[d - 1] <= '9') --d;
  if (d == head.size() || d == 0 || head[d - 1] != ':') return Match::kNo;
  size_t lead = 0;
  while (lead < head.size() && IsPyAsciiSpace(head[lead])) ++lead;
  // [^<]+ needs one character before the ':'; the greedy \s* gives one back if it must.
  if (lead >= d - 1) {
    if (lead == 0) return Match::kNo;
    lead = d - 2;
    if (lead >= head.size() || d < 2) return Match::kNo;
  }
  const size_t a = lt + kK2ArgBegin.size();
  const size_t e = t.find(kK2CallEnd, a);
  const size_t b = t.find(kK2CallBegin, a);
  if (b != std::string_view::npos && (e == std::string_view::npos || b < e)) return Match::kNo;
  if (e == std::string_view::npos) return Match::kPending;
  call->id = std::string(head.substr(lead));
  std::string_view name = call->id;
  name = name.substr(0, name.find(':'));
  const size_t dot = name.rfind('.');
  call->name = std::string(dot == std::string_view::npos ? name : name.substr(dot + 1));
  call->arguments = std::string(StripPySpace(t.substr(a, e - a)));
  *end = e + kK2CallEnd.size();
  return Match::kYes;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Reasoning

std::vector<std::string> KimiK2Reasoning::Markers() const {
  return {std::string(kK2ThinkOpen), std::string(kK2ThinkClose), std::string(kK2SectionBegin)};
}

std::pair<std::string, std::optional<std::string>> KimiK2Reasoning::Extract(std::string_view t) {
  // vLLM: <think> is consumed only at offset 0; </think> is looked for from offset 0.
  const size_t start = t.substr(0, kK2ThinkOpen.size()) == kK2ThinkOpen ? kK2ThinkOpen.size() : 0;
  const size_t end = t.find(kK2ThinkClose);
  if (end != std::string_view::npos) {
    return {std::string(t.substr(start, end - start)),
            std::string(t.substr(end + kK2ThinkClose.size()))};
  }
  const size_t section = t.find(kK2SectionBegin);
  if (section != std::string_view::npos) {
    return {std::string(t.substr(start, section - start)), std::string(t.substr(section))};
  }
  return {std::string(t.substr(start)), std::nullopt};
}

void KimiK2Reasoning::Feed(std::string_view text, std::string* reasoning, std::string* rest) {
  buf_.append(text);
  if (state_ == State::kStart) {
    if (buf_.size() < kK2ThinkOpen.size() && kK2ThinkOpen.substr(0, buf_.size()) == buf_) return;
    if (buf_.compare(0, kK2ThinkOpen.size(), kK2ThinkOpen) == 0) buf_.erase(0, kK2ThinkOpen.size());
    state_ = State::kReasoning;
  }
  if (state_ == State::kReasoning) {
    const size_t end = buf_.find(kK2ThinkClose);
    const size_t section = buf_.find(kK2SectionBegin);
    if (section != std::string::npos && (end == std::string::npos || section < end)) {
      // A </think> later in the output would still make all of this reasoning: hold it.
      reasoning->append(buf_, 0, section);
      buf_.erase(0, section);
      state_ = State::kHeld;
    } else if (end == std::string::npos) {
      const size_t keep = PartialMarkerTail(buf_, {kK2ThinkClose, kK2SectionBegin});
      reasoning->append(buf_, 0, buf_.size() - keep);
      buf_.erase(0, buf_.size() - keep);
      return;
    }
  }
  if (state_ == State::kReasoning || state_ == State::kHeld) {
    const size_t end = buf_.find(kK2ThinkClose);
    if (end == std::string::npos) return;
    reasoning->append(buf_, 0, end);
    buf_.erase(0, end + kK2ThinkClose.size());
    state_ = State::kRest;
  }
  rest->append(buf_);
  buf_.clear();
}

void KimiK2Reasoning::Finish(std::string* reasoning, std::string* rest) {
  (state_ == State::kHeld ? rest : reasoning)->append(buf_);
  buf_.clear();
  state_ = State::kRest;
}

// ---------------------------------------------------------------------------------------------
// Tool calls

std::vector<std::string> KimiK2Tools::Markers() const {
  return {std::string(kK2SectionBegin), std::string(kK2SectionEnd), std::string(kK2CallBegin),
          std::string(kK2ArgBegin), std::string(kK2CallEnd)};
}

ParsedOutput KimiK2Tools::Extract(std::string_view t) {
  ParsedOutput out;
  const size_t section = t.find(kK2SectionBegin);
  if (section == std::string_view::npos) {
    out.content = std::string(t);
    return out;
  }
  out.content = std::string(t.substr(0, section));
  // findall over the whole output, as vLLM's regex does.
  for (size_t s = t.find(kK2CallBegin); s != std::string_view::npos;) {
    ParsedToolCall call;
    size_t end = 0;
    if (MatchCall(t, s, &call, &end) == Match::kYes) {
      out.tool_calls.push_back(std::move(call));
      s = t.find(kK2CallBegin, end);
    } else {
      s = t.find(kK2CallBegin, s + 1);
    }
  }
  return out;
}

void KimiK2Tools::ScanCalls(std::vector<ParsedToolCall>* calls) {
  for (size_t s = all_.find(kK2CallBegin, scan_); s != std::string::npos;
       s = all_.find(kK2CallBegin, scan_)) {
    ParsedToolCall call;
    size_t end = 0;
    const Match m = MatchCall(all_, s, &call, &end);
    if (m == Match::kPending) {
      scan_ = s;
      return;
    }
    if (m == Match::kYes) {
      calls->push_back(std::move(call));
      scan_ = end;
    } else {
      scan_ = s + 1;
    }
  }
  // No call begins after scan_: keep a partial <|tool_call_begin|> in view.
  scan_ = std::max(scan_, all_.size() - PartialMarkerTail(all_, {kK2CallBegin}));
}

void KimiK2Tools::Feed(std::string_view text, std::string* content,
                       std::vector<ParsedToolCall>* calls) {
  all_.append(text);
  if (!in_section_) {
    const size_t section = all_.find(kK2SectionBegin, sent_);
    if (section == std::string::npos) {
      const size_t keep = PartialMarkerTail(std::string_view(all_).substr(sent_), {kK2SectionBegin});
      content->append(all_, sent_, all_.size() - keep - sent_);
      sent_ = all_.size() - keep;
      return;
    }
    content->append(all_, sent_, section - sent_);
    sent_ = section;
    in_section_ = true;
  }
  ScanCalls(calls);
}

void KimiK2Tools::Finish(std::string* content, std::vector<ParsedToolCall>* calls) {
  if (!in_section_) {
    content->append(all_, sent_);
    sent_ = all_.size();
  }
}

}  // namespace mxserve
