// Builds OpenAI-shaped response bodies from engine events: chat.completion and
// chat.completion.chunk, text_completion (whole and streamed), usage, logprobs in the chat and
// legacy shapes, and the {"error": {...}} body. Not thread-safe: one per request, fed in order.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "coordinator/chat/chat_template.h"
#include "coordinator/engine/request.h"
#include "coordinator/frontends/openai_api.h"
#include "coordinator/frontends/serving_context.h"
#include "nlohmann/json.hpp"

namespace mxserve::frontends {

// {"error": {"message", "type", "param", "code"}} for a non-OK status (type via status_map).
std::string ErrorBody(const absl::Status& status);
// Same shape for transport-level errors that have no absl code (413, 405).
std::string ErrorBody(absl::string_view message, absl::string_view type, absl::string_view param,
                      absl::string_view code);
// OpenAI's finish_reason: FinishReasonName, but "stop" for a request still running.
absl::string_view FinishReasonString(FinishReason r);

// One chat completion. Stream mode: Chunks() per event gives the SSE payloads to send (JSON
// strings without the "data: " framing); the caller adds "[DONE]". Whole mode: Add() every
// event, then Body().
class ChatCompletionResponder {
 public:
  ChatCompletionResponder(const ServingContext& ctx, const ChatCompletionRequest& request,
                          int64_t created);
  // Answers choice `index` of n (ChoicesResponder): chunks and body carry that index, and the
  // usage chunk is left to ChoicesResponder.
  void ForChoice(int index) { index_ = index, per_choice_ = true; }
  std::vector<std::string> Chunks(const GenerationEvent& event);
  void Add(const GenerationEvent& event);
  std::string Body() const;

 private:
  struct Piece {
    std::string content, reasoning;
    std::vector<ChatOutputParser::ToolCallDelta> tool_calls;
  };
  struct ToolCall {
    std::string id, name, arguments;
  };
  // The finish_reason to report: "tool_calls" when the turn ended by calling tools.
  std::string Finish(FinishReason r) const;
  // Records pieces of tool calls; returns the streamed "tool_calls" delta array.
  nlohmann::json TrackToolCalls(const std::vector<ChatOutputParser::ToolCallDelta>& deltas);
  Piece Parse(const GenerationEvent& event);
  std::string LogprobsJson(const std::vector<int32_t>& ids,
                           const std::vector<TokenLogprob>& lps) const;  // "" = none
  std::string UsageJson() const;

  const ServingContext& ctx_;
  std::string id_;
  int64_t created_;
  bool logprobs_;
  bool include_usage_;
  bool tokens_as_ids_;
  int index_ = 0;
  bool per_choice_ = false;
  int prompt_tokens_;
  std::unique_ptr<ChatOutputParser> parser_;
  bool sent_role_ = false;
  // Whole-mode accumulation.
  std::string content_, reasoning_;
  std::vector<int32_t> ids_;
  std::vector<TokenLogprob> lps_;
  FinishReason finish_ = FinishReason::kNone;
  std::string stop_reason_;
  int usage_prompt_ = 0, usage_completion_ = 0;
  int completion_count_ = 0;
  std::map<int, ToolCall> tool_calls_;  // by index
};

// One text completion (/v1/completions), same two modes.
class CompletionResponder {
 public:
  CompletionResponder(const ServingContext& ctx, const CompletionRequest& request,
                      int64_t created);
  void ForChoice(int index) { index_ = index, per_choice_ = true; }  // as the chat one
  std::vector<std::string> Chunks(const GenerationEvent& event);
  void Add(const GenerationEvent& event);
  std::string Body() const;

 private:
  // This event's text and legacy logprobs {tokens, token_logprobs, top_logprobs, text_offset}
  // (prompt ones first, on the first event, when echoing).
  void Collect(const GenerationEvent& event, std::string* text, nlohmann::json* logprobs);
  std::string UsageJson() const;

  const ServingContext& ctx_;
  std::string id_;
  int64_t created_;
  bool echo_;
  int logprobs_;
  bool include_usage_;
  bool tokens_as_ids_;
  int index_ = 0;
  bool per_choice_ = false;
  std::vector<int32_t> prompt_ids_;
  std::string prompt_text_;
  bool first_ = true;
  int64_t text_offset_ = 0;  // running offset (characters) for logprobs.text_offset
  int prompt_tokens_;
  // Whole-mode accumulation.
  std::string text_;
  nlohmann::json logprobs_json_;
  FinishReason finish_ = FinishReason::kNone;
  std::string stop_reason_;
  int usage_prompt_ = 0, usage_completion_ = 0;
  int completion_count_ = 0;
};

// n > 1 choices behind one response (R: ChatCompletionResponder or CompletionResponder). Choice
// i is answered by choices[i] (its engine request is ChoiceRequests(...)[i]); streamed chunks
// pass through with index i, and one usage chunk (prompt once, completions summed, as OpenAI)
// follows the last choice's finish; whole mode merges the n bodies. Thread-safe.
class ChoicesUsage {
 public:
  // `head`: the id/object/created/model fields of the response's chunks.
  ChoicesUsage(int n, bool include_usage, nlohmann::json head)
      : finished_(n, false), completion_(n, 0), include_usage_(include_usage),
        head_(std::move(head)) {}
  // Counts choice i's event; the usage chunk once every choice has finished ("" otherwise).
  std::string Count(int i, const GenerationEvent& event);
  bool done() const;
  // Merges the choices' whole bodies (each with one choice) into one.
  std::string Merge(const std::vector<std::string>& bodies) const;

 private:
  std::vector<bool> finished_;
  std::vector<int> completion_;
  int prompt_ = 0;
  bool include_usage_;
  nlohmann::json head_;
};

template <typename R>
class ChoicesResponder {
 public:
  ChoicesResponder(std::vector<std::unique_ptr<R>> choices, bool include_usage,
                   nlohmann::json head)
      : choices_(std::move(choices)),
        usage_(static_cast<int>(choices_.size()), include_usage, std::move(head)) {
    for (size_t i = 0; i < choices_.size(); ++i) choices_[i]->ForChoice(static_cast<int>(i));
  }
  int n() const { return static_cast<int>(choices_.size()); }
  bool done() const {
    absl::MutexLock lock(&mu_);
    return usage_.done();
  }
  std::vector<std::string> Chunks(int i, const GenerationEvent& event) {
    absl::MutexLock lock(&mu_);
    std::vector<std::string> out = choices_[i]->Chunks(event);
    std::string usage = usage_.Count(i, event);
    if (!usage.empty()) out.push_back(std::move(usage));
    return out;
  }
  // Whole mode; true once every choice has finished (then Body()).
  bool Add(int i, const GenerationEvent& event) {
    absl::MutexLock lock(&mu_);
    choices_[i]->Add(event);
    usage_.Count(i, event);
    return usage_.done();
  }
  std::string Body() const {
    absl::MutexLock lock(&mu_);
    std::vector<std::string> bodies;
    for (const auto& c : choices_) bodies.push_back(c->Body());
    return usage_.Merge(bodies);
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<R>> choices_;  // the vector is fixed after construction
  ChoicesUsage usage_ ABSL_GUARDED_BY(mu_);
};

}  // namespace mxserve::frontends
