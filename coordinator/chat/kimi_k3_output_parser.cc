#include "coordinator/chat/kimi_k3_output_parser.h"

#include "coordinator/chat/harmony_tools.h"
#include "core/bounded_json.h"
#include "nlohmann/json.hpp"

namespace mxserve {
namespace {

constexpr std::string_view kThinkOpen = "<|open|>think<|sep|>";
constexpr std::string_view kThinkClose = "<|close|>think<|sep|>";
constexpr std::string_view kResponseOpen = "<|open|>response<|sep|>";
constexpr std::string_view kResponseClose = "<|close|>response<|sep|>";
constexpr std::string_view kMessageClose = "<|close|>message<|sep|>";
constexpr std::string_view kToolsOpen = "<|open|>tools<|sep|>";
constexpr std::string_view kToolsClose = "<|close|>tools<|sep|>";
constexpr std::string_view kOpen = "<|open|>";
constexpr std::string_view kSep = "<|sep|>";
constexpr std::string_view kCallClose = "<|close|>call<|sep|>";
constexpr std::string_view kArgClose = "<|close|>argument<|sep|>";
constexpr auto npos = std::string_view::npos;

std::string ReplaceAll(std::string_view s, std::string_view what, std::string_view with) {
  std::string out;
  for (size_t p = 0;;) {
    const size_t q = s.find(what, p);
    out.append(s.substr(p, q == npos ? npos : q - p));
    if (q == npos) return out;
    out.append(with);
    p = q + what.size();
  }
}
std::string RemoveAll(std::string_view s, std::string_view what) { return ReplaceAll(s, what, ""); }

bool IsWordByte(unsigned char c) {  // Python's \w, non-ASCII letters taken as word bytes
  return c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
         c >= 0x80;
}

// vLLM's attribute pattern (\w+)="([^"]*)", values unescaped (&quot; then &amp;); a repeated key
// keeps its last value.
std::string Attr(std::string_view s, std::string_view key) {
  std::string found;
  bool have = false;
  for (size_t i = 0; i < s.size(); ++i) {
    if (!IsWordByte(s[i]) || (i > 0 && IsWordByte(s[i - 1]))) continue;
    size_t k = i;
    while (k < s.size() && IsWordByte(s[k])) ++k;
    if (k + 1 >= s.size() || s[k] != '=' || s[k + 1] != '"') continue;
    const size_t v = k + 2, q = s.find('"', v);
    if (q == npos) continue;
    if (s.substr(i, k - i) == key) {
      found = ReplaceAll(ReplaceAll(s.substr(v, q - v), "&quot;", "\""), "&amp;", "&");
      have = true;
    }
    i = q;
  }
  return have ? found : "";
}

// `<|open|>\s*WORD\s+` at p: the end of that prefix, or npos.
size_t OpenWord(std::string_view t, size_t p, std::string_view word) {
  size_t q = p + kOpen.size();
  while (q < t.size() && IsPyAsciiSpace(t[q])) ++q;
  if (t.substr(q, word.size()) != word) return npos;
  q += word.size();
  const size_t ws = q;
  while (q < t.size() && IsPyAsciiSpace(t[q])) ++q;
  return q > ws ? q : npos;
}

// Blocks `<|open|>WORD attrs<|sep|>BODY CLOSE` in order, as finditer finds them.
template <typename F>
void ForEachBlock(std::string_view t, std::string_view word, std::string_view close, F f) {
  for (size_t p = t.find(kOpen); p != npos;) {
    const size_t a = OpenWord(t, p, word);
    const size_t sep = a == npos ? npos : t.find(kSep, a);
    const size_t end = sep == npos ? npos : t.find(close, sep + kSep.size());
    if (end == npos) {
      p = t.find(kOpen, p + 1);
      continue;
    }
    f(t.substr(a, sep - a), t.substr(sep + kSep.size(), end - sep - kSep.size()));
    p = t.find(kOpen, end + close.size());
  }
}

std::optional<ParsedToolCall> DecodeCall(std::string_view attrs, std::string_view body) {
  nlohmann::ordered_json args = nlohmann::ordered_json::object();
  ForEachBlock(body, "argument", kArgClose, [&](std::string_view a, std::string_view value) {
    const std::string key = Attr(a, "key");
    std::string type = Attr(a, "type");
    if (type.empty() && a.find("type=\"\"") == npos) type = "string";
    if (type == "string") {
      args[key] = std::string(value);
      return;
    }
    BoundedJsonLimits limits;
    limits.refuse_duplicate_keys = false;  // Python's json.loads keeps the last
    auto parsed = ParseBoundedJson<nlohmann::ordered_json>(value, limits);
    args[key] = parsed.ok() ? *std::move(parsed) : nlohmann::ordered_json(std::string(value));
  });
  std::string name = Attr(attrs, "tool");
  if (name.empty()) return std::nullopt;
  return ParsedToolCall{"", std::move(name), PythonJsonDumps(args)};
}

// vLLM's _strip_response_content / _strip_content_wrapper.
std::string Unwrap(std::string_view t) {
  std::string out;
  const size_t ro = t.find(kResponseOpen);
  if (ro != npos) {
    const size_t body = ro + kResponseOpen.size();
    const size_t rc = t.find(kResponseClose, body);
    out = std::string(t.substr(body, rc == npos ? npos : rc - body));
  } else {
    out = RemoveAll(RemoveAll(t, kResponseOpen), kResponseClose);
  }
  return RemoveAll(out, kMessageClose);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Reasoning

std::pair<std::string, std::optional<std::string>> KimiK3Reasoning::Extract(std::string_view t) {
  const size_t start = t.substr(0, kThinkOpen.size()) == kThinkOpen ? kThinkOpen.size() : 0;
  const size_t close = t.find(kThinkClose, start);
  if (close == npos) return {std::string(t.substr(start)), std::nullopt};
  return {std::string(t.substr(start, close - start)),
          std::string(t.substr(close + kThinkClose.size()))};
}

void KimiK3Reasoning::Feed(std::string_view text, std::string* reasoning, std::string* rest) {
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

void KimiK3Reasoning::Finish(std::string* reasoning, std::string*) {
  reasoning->append(buf_);
  buf_.clear();
  done_ = true;
}

// ---------------------------------------------------------------------------------------------
// Response and tools channels

ParsedOutput KimiK3Tools::Extract(std::string_view t, bool tools_active) {
  ParsedOutput out;
  if (!tools_active) {
    out.content = Unwrap(t);
    return out;
  }
  // vLLM's _content: the first complete response channel, else the text before the tools.
  auto content = [&](std::string_view before) {
    const size_t ro = t.find(kResponseOpen);
    if (ro != npos) {
      const size_t body = ro + kResponseOpen.size();
      const size_t rc = t.find(kResponseClose, body);
      if (rc != npos) return std::string(t.substr(body, rc - body));
    }
    return Unwrap(before);
  };
  const size_t to = t.find(kToolsOpen);
  if (to == npos) {
    out.content = content(t);
    return out;
  }
  const size_t start = to + kToolsOpen.size();
  const size_t tc = t.find(kToolsClose, start);
  std::string_view section = t.substr(start, tc == npos ? npos : tc - start);
  ForEachBlock(section, "call", kCallClose, [&](std::string_view attrs, std::string_view body) {
    if (auto call = DecodeCall(attrs, body)) out.tool_calls.push_back(*std::move(call));
  });
  out.content = content(t.substr(0, to));
  return out;
}

void KimiK3Tools::Feed(std::string_view text, std::string* content, std::vector<ParsedToolCall>*) {
  all_.append(text);
  if (held_) return;
  if (!body_known_) {
    if (all_.size() < kResponseOpen.size() && kResponseOpen.substr(0, all_.size()) == all_) return;
    body_start_ = all_.compare(0, kResponseOpen.size(), kResponseOpen) == 0 ? kResponseOpen.size() : 0;
    body_known_ = true;
  }
  // Plain text up to the first marker is content in every reading of the output.
  const size_t from = body_start_ + sent_.size();
  size_t stop = all_.find("<|", from);
  if (stop != std::string::npos) {
    held_ = true;
  } else {
    stop = all_.size() - (all_.back() == '<' ? 1 : 0);
  }
  content->append(all_, from, stop - from);
  sent_.append(all_, from, stop - from);
}

void KimiK3Tools::Finish(std::string* content, std::vector<ParsedToolCall>* calls) {
  ParsedOutput whole = Extract(all_, tools_active_);
  if (whole.content.compare(0, sent_.size(), sent_) == 0) content->append(whole.content, sent_.size());
  sent_ = whole.content;
  held_ = true;
  for (ParsedToolCall& c : whole.tool_calls) calls->push_back(std::move(c));
}

}  // namespace mxserve
