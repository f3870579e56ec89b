// Builds Responses API output from engine events: the Response object (output items
// "reasoning", "message", "function_call", usage) and, streamed, its server-sent events with the
// names vLLM emits for gpt-oss (response.created, response.output_item.added,
// response.reasoning_text.delta, response.output_text.delta, ..., response.completed), each
// framed "event: <type>\ndata: <json>\n\n" and numbered by sequence_number. Not thread-safe: one
// per request, fed in order.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "coordinator/chat/chat_template.h"
#include "coordinator/engine/request.h"
#include "coordinator/frontends/responses_api.h"
#include "coordinator/frontends/serving_context.h"
#include "nlohmann/json.hpp"

namespace mxserve::frontends {

class ResponsesResponder {
 public:
  // Its Chunks are whole SSE frames, errors included, and the stream has no "[DONE]".
  static constexpr bool kFramesOwnEvents = true;

  ResponsesResponder(const ServingContext& ctx, const ResponsesRequest& request, int64_t created);
  // Stream mode: the SSE frames this event adds (the first call starts with response.created
  // and response.in_progress; the finishing one ends with response.completed, or with an
  // "error" event when the generation failed).
  std::vector<std::string> Chunks(const GenerationEvent& event);
  // Whole mode: Add() every event, then Body() (the Response object).
  void Add(const GenerationEvent& event);
  std::string Body() const;

 private:
  enum class Kind { kReasoning, kMessage, kFunctionCall };
  struct Item {
    Kind kind;
    std::string id;
    std::string text;  // reasoning text, output text, or call arguments
    std::string name, call_id;  // function calls
    int call_index = -1;        // the parser's tool call index
    bool done = false;
    bool incomplete = false;  // the output ended (max_output_tokens) inside it
  };

  // Feeds the event's tokens to the parser and routes what it returns into items; with
  // `events` non-null also appends the stream events that describes.
  void Consume(const GenerationEvent& event, std::vector<std::string>* events);
  // Appends to the open item of `kind` (closing the open one and opening one of that kind when
  // it differs); call_index tells function calls apart.
  void Append(Kind kind, const std::string& text, int call_index, const std::string& name,
              std::vector<std::string>* events);
  void Close(std::vector<std::string>* events);
  // The final event's status and usage (before the open item is closed).
  void Finish(const GenerationEvent& event);
  nlohmann::json ItemJson(const Item& item) const;
  nlohmann::json Response(const std::string& status) const;
  std::string Event(const char* type, nlohmann::json fields);

  const ServingContext& ctx_;
  nlohmann::json head_;  // id, created_at, model and the request's echoed fields
  int prompt_tokens_;
  std::unique_ptr<ChatOutputParser> parser_;
  std::vector<Item> items_;
  int open_ = -1;  // index into items_ of the item being written, -1 = none
  int sequence_ = 0;
  bool started_ = false;
  // Set once finished.
  std::string status_ = "in_progress";
  bool incomplete_ = false;  // ended by max_output_tokens
  int usage_prompt_ = 0, usage_completion_ = 0;
  int completion_count_ = 0;
  int reasoning_tokens_ = 0;  // tokens whose text went to reasoning
};

}  // namespace mxserve::frontends
