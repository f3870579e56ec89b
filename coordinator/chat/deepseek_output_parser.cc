#include "coordinator/chat/deepseek_output_parser.h"

namespace mxserve {
namespace {

constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";
constexpr std::string_view kJsonFence = "\n```json\n";
constexpr std::string_view kCloseFence = "\n```";

// vLLM's pattern (no DOTALL, so `.` stops at a newline), from a call-begin at `s`:
//   <｜tool▁call▁begin｜>(?P<type>.*)<｜tool▁sep｜>(?P<name>.*)\n```json\n(?P<args>.*)\n```<｜tool▁call▁end｜>
// The greedy type takes the line up to its last separator; the name the rest of that line.
bool MatchCall(std::string_view t, size_t s, std::string* type, ParsedToolCall* call,
               size_t* end) {
  const size_t p = s + kDsCallBegin.size();
  const size_t nl = t.find('\n', p);
  if (nl == std::string_view::npos) return false;
  const std::string_view line = t.substr(p, nl - p);
  const size_t sep = line.rfind(kDsSep);
  if (sep == std::string_view::npos) return false;
  if (t.substr(nl, kJsonFence.size()) != kJsonFence) return false;
  const size_t a = nl + kJsonFence.size();
  const size_t nl2 = t.find('\n', a);
  if (nl2 == std::string_view::npos) return false;
  if (t.substr(nl2, kCloseFence.size()) != kCloseFence ||
      t.substr(nl2 + kCloseFence.size(), kDsCallEnd.size()) != kDsCallEnd) {
    return false;
  }
  *type = std::string(line.substr(0, sep));
  call->id.clear();
  call->name = std::string(line.substr(sep + kDsSep.size()));
  call->arguments = std::string(t.substr(a, nl2 - a));
  *end = nl2 + kCloseFence.size() + kDsCallEnd.size();
  return true;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// deepseek_r1 reasoning

std::pair<std::string, std::optional<std::string>> DeepSeekR1Reasoning::Extract(
    std::string_view t) {
  const size_t open = t.find(kThinkOpen);
  if (open != std::string_view::npos) t = t.substr(open + kThinkOpen.size());
  const size_t close = t.find(kThinkClose);
  if (close == std::string_view::npos) return {std::string(t), std::nullopt};
  return {std::string(t.substr(0, close)), std::string(t.substr(close + kThinkClose.size()))};
}

void DeepSeekR1Reasoning::Feed(std::string_view text, std::string* reasoning, std::string* rest) {
  if (done_) {
    rest->append(text);
    return;
  }
  buf_.append(text);
  if (!started_) {
    if (buf_.size() < kThinkOpen.size() && kThinkOpen.substr(0, buf_.size()) == buf_) return;
    if (buf_.compare(0, kThinkOpen.size(), kThinkOpen) == 0) buf_.erase(0, kThinkOpen.size());
    started_ = true;
  }
  const size_t close = buf_.find(kThinkClose);
  if (close != std::string::npos) {
    reasoning->append(buf_, 0, close);
    rest->append(buf_, close + kThinkClose.size());
    buf_.clear();
    done_ = true;
    return;
  }
  const size_t keep = PartialMarkerTail(buf_, {kThinkClose});
  reasoning->append(buf_, 0, buf_.size() - keep);
  buf_.erase(0, buf_.size() - keep);
}

void DeepSeekR1Reasoning::Finish(std::string* reasoning, std::string*) {
  reasoning->append(buf_);
  buf_.clear();
  done_ = true;
}

// ---------------------------------------------------------------------------------------------
// deepseek_v3 tool calls

std::vector<std::string> DeepSeekV3Tools::Markers() const {
  return {std::string(kDsCallsBegin), std::string(kDsCallsEnd), std::string(kDsCallBegin),
          std::string(kDsCallEnd), std::string(kDsSep)};
}

ParsedOutput DeepSeekV3Tools::Extract(std::string_view t) {
  ParsedOutput out;
  const size_t begin = t.find(kDsCallsBegin);
  if (begin == std::string_view::npos) {
    out.content = std::string(t);
    return out;
  }
  for (size_t s = t.find(kDsCallBegin); s != std::string_view::npos;) {
    std::string type;
    ParsedToolCall call;
    size_t end = 0;
    if (MatchCall(t, s, &type, &call, &end)) {
      if (type != "function") {  // vLLM: ToolCall(type=...) fails validation -> all content
        out.tool_calls.clear();
        out.content = std::string(t);
        return out;
      }
      out.tool_calls.push_back(std::move(call));
      s = t.find(kDsCallBegin, end);
    } else {
      s = t.find(kDsCallBegin, s + 1);
    }
  }
  out.content = std::string(t.substr(0, begin));
  return out;
}

void DeepSeekV3Tools::Feed(std::string_view text, std::string* content,
                           std::vector<ParsedToolCall>*) {
  all_.append(text);
  if (in_calls_) return;
  const size_t begin = all_.find(kDsCallsBegin, sent_);
  if (begin != std::string::npos) {
    content->append(all_, sent_, begin - sent_);
    sent_ = begin;
    in_calls_ = true;
    return;
  }
  const size_t keep = PartialMarkerTail(std::string_view(all_).substr(sent_), {kDsCallsBegin});
  content->append(all_, sent_, all_.size() - keep - sent_);
  sent_ = all_.size() - keep;
}

void DeepSeekV3Tools::Finish(std::string* content, std::vector<ParsedToolCall>* calls) {
  ParsedOutput whole = Extract(all_);
  // Everything streamed so far is a prefix of the final content in every case.
  if (whole.content.size() > sent_) content->append(whole.content, sent_);
  sent_ = all_.size();
  for (ParsedToolCall& c : whole.tool_calls) calls->push_back(std::move(c));
}

}  // namespace mxserve
