#include "coordinator/frontends/openai_response.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "coordinator/frontends/api_error.h"
#include "core/status_map.h"

namespace mxserve::frontends {
namespace {

using json = nlohmann::json;

// Token text from the tokenizer may be partial UTF-8: replace rather than throw when dumping.
std::string Dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// JSON has no -inf; vLLM reports -9999.0 for a logprob that underflowed.
double FiniteLogprob(float lp) { return std::isfinite(lp) ? static_cast<double>(lp) : -9999.0; }

json Bytes(absl::string_view s) {
  json arr = json::array();
  for (unsigned char c : s) arr.push_back(static_cast<int>(c));
  return arr;
}

std::string TokenBytes(const ServingContext& ctx, int32_t id) {
  auto b = ctx.tokenizer->DecodeBytes(std::span<const int32_t>(&id, 1), /*skip_special=*/false);
  return b.ok() ? *b : ctx.tokenizer->TokenString(id);
}

// Characters (code points) in UTF-8 text, for the legacy text_offset.
int64_t CharCount(absl::string_view s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

json Usage(int prompt, int completion) {
  return json{{"prompt_tokens", prompt},
              {"completion_tokens", completion},
              {"total_tokens", prompt + completion}};
}

json StopReason(const std::string& s) { return s.empty() ? json(nullptr) : json(s); }

// A token as logprobs name it: its text, or "token_id:N" (vLLM's return_tokens_as_token_ids,
// exact where text is ambiguous: partial UTF-8, special tokens).
std::string TokenName(const ServingContext& ctx, int32_t id, bool as_ids) {
  return as_ids ? absl::StrCat("token_id:", id) : ctx.tokenizer->TokenString(id);
}

}  // namespace

std::string ErrorBody(absl::string_view message, absl::string_view type, absl::string_view param,
                      absl::string_view code) {
  json err{{"message", message},
           {"type", type},
           {"param", param.empty() ? json(nullptr) : json(param)},
           {"code", code.empty() ? json(nullptr) : json(code)}};
  return Dump(json{{"error", std::move(err)}});
}

std::string ErrorBody(const absl::Status& status) {
  return ErrorBody(status.message(), std::string(OpenAiErrorType(status)), ParamOf(status).value_or(""),
                   CodeOf(status).value_or(""));
}

absl::string_view FinishReasonString(FinishReason r) {
  return r == FinishReason::kNone ? "stop" : FinishReasonName(r);
}

// ---------------------------------------------------------------------------------------------
// Chat

ChatCompletionResponder::ChatCompletionResponder(const ServingContext& ctx,
                                                 const ChatCompletionRequest& request,
                                                 int64_t created)
    : ctx_(ctx),
      id_(request.generate.request_id),
      created_(created),
      logprobs_(request.logprobs),
      include_usage_(request.include_usage),
      tokens_as_ids_(request.tokens_as_ids),
      prompt_tokens_(static_cast<int>(request.generate.prompt_tokens.size())),
      parser_(ctx.NewOutputParser(request.render)) {}

ChatCompletionResponder::Piece ChatCompletionResponder::Parse(const GenerationEvent& event) {
  Piece p;
  completion_count_ += static_cast<int>(event.token_ids.size());
  if (!parser_) {
    p.content = event.text;
    return p;
  }
  auto take = [&p](ChatOutputParser::Delta d) {
    p.content += d.content;
    p.reasoning += d.reasoning;
    for (auto& t : d.tool_calls) p.tool_calls.push_back(std::move(t));
  };
  for (int32_t id : event.token_ids) take(parser_->Push(id));
  if (event.finished) take(parser_->Finish());
  return p;
}

json ChatCompletionResponder::TrackToolCalls(
    const std::vector<ChatOutputParser::ToolCallDelta>& deltas) {
  json out = json::array();
  for (const auto& d : deltas) {
    auto [it, fresh] = tool_calls_.try_emplace(d.index);
    ToolCall& call = it->second;
    json piece{{"index", d.index}};
    json fn = json::object();
    if (fresh) {
      call.id = d.id.empty() ? NewRequestId("call") : d.id;  // Kimi K2 names its calls
      piece["id"] = call.id;
      piece["type"] = "function";
    }
    if (!d.name.empty()) {
      call.name += d.name;
      fn["name"] = d.name;
    }
    call.arguments += d.arguments;
    fn["arguments"] = d.arguments;
    piece["function"] = std::move(fn);
    out.push_back(std::move(piece));
  }
  return out;
}

std::string ChatCompletionResponder::Finish(FinishReason r) const {
  if (r == FinishReason::kStop && !tool_calls_.empty()) return "tool_calls";
  return std::string(FinishReasonString(r));
}

std::string ChatCompletionResponder::LogprobsJson(const std::vector<int32_t>& ids,
                                                  const std::vector<TokenLogprob>& lps) const {
  json content = json::array();
  for (size_t i = 0; i < lps.size(); ++i) {
    const TokenLogprob& lp = lps[i];
    int32_t id = i < ids.size() ? ids[i] : lp.token_id;
    std::string bytes = TokenBytes(ctx_, id);
    json top = json::array();
    for (const TopLogprob& t : lp.top) {
      std::string tb = TokenBytes(ctx_, t.token_id);
      top.push_back(json{{"token", TokenName(ctx_, t.token_id, tokens_as_ids_)},
                         {"logprob", FiniteLogprob(t.logprob)},
                         {"bytes", Bytes(tb)}});
    }
    content.push_back(json{{"token", TokenName(ctx_, id, tokens_as_ids_)},
                           {"logprob", FiniteLogprob(lp.logprob)},
                           {"bytes", Bytes(bytes)},
                           {"top_logprobs", std::move(top)}});
  }
  return Dump(json{{"content", std::move(content)}});
}

std::vector<std::string> ChatCompletionResponder::Chunks(const GenerationEvent& event) {
  std::vector<std::string> out;
  auto chunk = [&](json delta, json logprobs, json finish) {
    json c{{"id", id_},
           {"object", "chat.completion.chunk"},
           {"created", created_},
           {"model", ctx_.model_id},
           {"choices", json::array({json{{"index", index_},
                                         {"delta", std::move(delta)},
                                         {"logprobs", std::move(logprobs)},
                                         {"finish_reason", std::move(finish)}}})}};
    if (include_usage_) c["usage"] = nullptr;  // as OpenAI: null on all but the last chunk
    out.push_back(Dump(c));
  };
  if (!sent_role_) {
    sent_role_ = true;
    chunk(json{{"role", "assistant"}, {"content", ""}}, nullptr, nullptr);
  }
  Piece p = Parse(event);
  json lp = nullptr;
  if (logprobs_ && !event.logprobs.empty()) {
    lp = json::parse(LogprobsJson(event.token_ids, event.logprobs));
  }
  json calls = TrackToolCalls(p.tool_calls);
  if (!p.content.empty() || !p.reasoning.empty() || !lp.is_null() || !calls.empty()) {
    json delta = json::object();
    if (!p.reasoning.empty()) delta["reasoning_content"] = p.reasoning;
    if (!p.content.empty() || (p.reasoning.empty() && calls.empty())) delta["content"] = p.content;
    if (!calls.empty()) delta["tool_calls"] = std::move(calls);
    chunk(std::move(delta), std::move(lp), nullptr);
  }
  if (event.finished) {
    chunk(json::object(), nullptr, Finish(event.finish_reason));
    if (include_usage_ && !per_choice_) {
      int prompt = event.prompt_tokens > 0 ? event.prompt_tokens : prompt_tokens_;
      int completion = event.completion_tokens > 0 ? event.completion_tokens : completion_count_;
      out.push_back(Dump(json{{"id", id_},
                              {"object", "chat.completion.chunk"},
                              {"created", created_},
                              {"model", ctx_.model_id},
                              {"choices", json::array()},
                              {"usage", Usage(prompt, completion)}}));
    }
  }
  return out;
}

void ChatCompletionResponder::Add(const GenerationEvent& event) {
  Piece p = Parse(event);
  content_ += p.content;
  reasoning_ += p.reasoning;
  TrackToolCalls(p.tool_calls);
  if (logprobs_) {
    ids_.insert(ids_.end(), event.token_ids.begin(), event.token_ids.end());
    lps_.insert(lps_.end(), event.logprobs.begin(), event.logprobs.end());
  }
  if (event.finished) {
    finish_ = event.finish_reason;
    stop_reason_ = event.stop_reason;
    usage_prompt_ = event.prompt_tokens > 0 ? event.prompt_tokens : prompt_tokens_;
    usage_completion_ = event.completion_tokens > 0 ? event.completion_tokens : completion_count_;
  }
}

std::string ChatCompletionResponder::Body() const {
  json calls = json::array();
  for (const auto& [index, call] : tool_calls_) {
    calls.push_back(json{{"id", call.id},
                         {"type", "function"},
                         {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
  }
  // As OpenAI: content is null on a turn that only calls tools.
  json content = content_.empty() && !calls.empty() ? json(nullptr) : json(content_);
  json message{{"role", "assistant"},
               {"content", std::move(content)},
               {"reasoning_content", reasoning_.empty() ? json(nullptr) : json(reasoning_)},
               {"refusal", nullptr},
               {"tool_calls", std::move(calls)}};
  json lp = logprobs_ ? json::parse(LogprobsJson(ids_, lps_)) : json(nullptr);
  json body{{"id", id_},
            {"object", "chat.completion"},
            {"created", created_},
            {"model", ctx_.model_id},
            {"choices", json::array({json{{"index", index_},
                                          {"message", std::move(message)},
                                          {"logprobs", std::move(lp)},
                                          {"finish_reason", Finish(finish_)},
                                          {"stop_reason", StopReason(stop_reason_)}}})},
            {"usage", Usage(usage_prompt_, usage_completion_)}};
  return Dump(body);
}

// ---------------------------------------------------------------------------------------------
// Completions

CompletionResponder::CompletionResponder(const ServingContext& ctx,
                                         const CompletionRequest& request, int64_t created)
    : ctx_(ctx),
      id_(request.generate.request_id),
      created_(created),
      echo_(request.echo),
      logprobs_(request.logprobs),
      include_usage_(request.include_usage),
      tokens_as_ids_(request.tokens_as_ids),
      prompt_ids_(request.generate.prompt_tokens),
      prompt_text_(request.prompt_text),
      prompt_tokens_(static_cast<int>(request.generate.prompt_tokens.size())),
      logprobs_json_(json{{"tokens", json::array()},
                          {"token_logprobs", json::array()},
                          {"top_logprobs", json::array()},
                          {"text_offset", json::array()}}) {}

void CompletionResponder::Collect(const GenerationEvent& event, std::string* text,
                                  json* logprobs) {
  completion_count_ += static_cast<int>(event.token_ids.size());
  auto add = [&](int32_t id, const TokenLogprob* lp) {
    std::string tok = ctx_.tokenizer->TokenString(id);
    (*logprobs)["tokens"].push_back(tokens_as_ids_ ? TokenName(ctx_, id, true) : tok);
    (*logprobs)["text_offset"].push_back(text_offset_);
    text_offset_ += CharCount(tok);
    if (lp == nullptr || std::isnan(lp->logprob)) {  // the first prompt token has no context
      (*logprobs)["token_logprobs"].push_back(nullptr);
      (*logprobs)["top_logprobs"].push_back(nullptr);
      return;
    }
    (*logprobs)["token_logprobs"].push_back(FiniteLogprob(lp->logprob));
    json top = json::object();
    for (const TopLogprob& t : lp->top) {
      top[TokenName(ctx_, t.token_id, tokens_as_ids_)] = FiniteLogprob(t.logprob);
    }
    (*logprobs)["top_logprobs"].push_back(std::move(top));
  };
  if (first_) {
    first_ = false;
    if (echo_) {
      *text += prompt_text_;
      if (logprobs_ >= 0) {
        for (size_t i = 0; i < prompt_ids_.size(); ++i) {
          add(prompt_ids_[i], i < event.prompt_logprobs.size() ? &event.prompt_logprobs[i]
                                                               : nullptr);
        }
      }
    }
  }
  *text += event.text;
  if (logprobs_ >= 0) {
    for (size_t i = 0; i < event.token_ids.size(); ++i) {
      add(event.token_ids[i], i < event.logprobs.size() ? &event.logprobs[i] : nullptr);
    }
  }
}

std::vector<std::string> CompletionResponder::Chunks(const GenerationEvent& event) {
  std::vector<std::string> out;
  std::string text;
  json lp{{"tokens", json::array()},
          {"token_logprobs", json::array()},
          {"top_logprobs", json::array()},
          {"text_offset", json::array()}};
  Collect(event, &text, &lp);
  auto chunk = [&](std::string t, json logprobs, json finish, json stop_reason) {
    json c{{"id", id_},
           {"object", "text_completion"},
           {"created", created_},
           {"model", ctx_.model_id},
           {"choices", json::array({json{{"index", index_},
                                         {"text", std::move(t)},
                                         {"logprobs", std::move(logprobs)},
                                         {"finish_reason", std::move(finish)},
                                         {"stop_reason", std::move(stop_reason)}}})}};
    if (include_usage_) c["usage"] = nullptr;
    out.push_back(Dump(c));
  };
  const bool has_lp = logprobs_ >= 0 && !lp["tokens"].empty();
  if (!text.empty() || has_lp) {
    chunk(std::move(text), has_lp ? std::move(lp) : json(nullptr), nullptr, nullptr);
  }
  if (event.finished) {
    chunk("", nullptr, FinishReasonString(event.finish_reason), StopReason(event.stop_reason));
    if (include_usage_ && !per_choice_) {
      int prompt = event.prompt_tokens > 0 ? event.prompt_tokens : prompt_tokens_;
      int completion = event.completion_tokens > 0 ? event.completion_tokens : completion_count_;
      out.push_back(Dump(json{{"id", id_},
                              {"object", "text_completion"},
                              {"created", created_},
                              {"model", ctx_.model_id},
                              {"choices", json::array()},
                              {"usage", Usage(prompt, completion)}}));
    }
  }
  return out;
}

void CompletionResponder::Add(const GenerationEvent& event) {
  Collect(event, &text_, &logprobs_json_);
  if (event.finished) {
    finish_ = event.finish_reason;
    stop_reason_ = event.stop_reason;
    usage_prompt_ = event.prompt_tokens > 0 ? event.prompt_tokens : prompt_tokens_;
    usage_completion_ = event.completion_tokens > 0 ? event.completion_tokens : completion_count_;
  }
}

std::string CompletionResponder::Body() const {
  json body{{"id", id_},
            {"object", "text_completion"},
            {"created", created_},
            {"model", ctx_.model_id},
            {"choices", json::array({json{{"index", index_},
                                          {"text", text_},
                                          {"logprobs", logprobs_ >= 0 ? logprobs_json_
                                                                      : json(nullptr)},
                                          {"finish_reason", FinishReasonString(finish_)},
                                          {"stop_reason", StopReason(stop_reason_)}}})},
            {"usage", Usage(usage_prompt_, usage_completion_)}};
  return Dump(body);
}

// ---------------------------------------------------------------------------------------------
// n > 1

std::string ChoicesUsage::Count(int i, const GenerationEvent& event) {
  if (finished_[i]) return "";
  completion_[i] = event.completion_tokens > 0
                       ? event.completion_tokens
                       : completion_[i] + static_cast<int>(event.token_ids.size());
  if (!event.finished) return "";
  finished_[i] = true;
  if (event.prompt_tokens > 0) prompt_ = event.prompt_tokens;
  if (!done() || !include_usage_) return "";
  int completion = 0;
  for (int c : completion_) completion += c;
  json u = head_;
  u["choices"] = json::array();
  u["usage"] = Usage(prompt_, completion);
  return Dump(u);
}

bool ChoicesUsage::done() const {
  for (bool f : finished_) {
    if (!f) return false;
  }
  return true;
}

std::string ChoicesUsage::Merge(const std::vector<std::string>& bodies) const {
  json out;
  json choices = json::array();
  int prompt = 0, completion = 0;
  for (const std::string& b : bodies) {
    json j = json::parse(b, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) continue;  // our own Dump output: cannot happen
    for (auto& c : j["choices"]) choices.push_back(std::move(c));
    prompt = j["usage"].value("prompt_tokens", 0);
    completion += j["usage"].value("completion_tokens", 0);
    if (out.is_null()) out = std::move(j);
  }
  if (out.is_null()) return "{}";
  out["choices"] = std::move(choices);
  out["usage"] = Usage(prompt, completion);
  return Dump(out);
}

}  // namespace mxserve::frontends
