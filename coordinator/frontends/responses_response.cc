#include "coordinator/frontends/responses_response.h"

#include "absl/strings/str_cat.h"
#include "coordinator/frontends/api_error.h"
#include "core/status_map.h"

namespace mxserve::frontends {
namespace {

using json = nlohmann::json;

// Model text may hold partial UTF-8 at a cut: replace rather than throw when dumping.
std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

ResponsesResponder::ResponsesResponder(const ServingContext& ctx, const ResponsesRequest& request,
                                       int64_t created)
    : ctx_(ctx),
      head_(request.echo),
      prompt_tokens_(static_cast<int>(request.generate.prompt_tokens.size())),
      parser_(ctx.NewOutputParser(request.render)) {
  head_["id"] = request.generate.request_id;
  head_["object"] = "response";
  head_["created_at"] = created;
  head_["model"] = ctx.model_id;
}

std::string ResponsesResponder::Event(const char* type, json fields) {
  fields["type"] = type;
  fields["sequence_number"] = sequence_++;
  return absl::StrCat("event: ", type, "\ndata: ", Dump(fields), "\n\n");
}

json ResponsesResponder::ItemJson(const Item& item) const {
  const char* status = !item.done ? "in_progress" : item.incomplete ? "incomplete" : "completed";
  switch (item.kind) {
    case Kind::kReasoning: {
      json content = json::array();
      if (item.done) content.push_back(json{{"type", "reasoning_text"}, {"text", item.text}});
      return json{{"id", item.id},           {"type", "reasoning"},
                  {"summary", json::array()}, {"content", std::move(content)},
                  {"encrypted_content", nullptr}, {"status", status}};
    }
    case Kind::kMessage: {
      json content = json::array();
      if (item.done) {
        content.push_back(json{{"type", "output_text"},
                               {"text", item.text},
                               {"annotations", json::array()},
                               {"logprobs", json::array()}});
      }
      return json{{"id", item.id},      {"type", "message"},
                  {"role", "assistant"}, {"content", std::move(content)},
                  {"status", status}};
    }
    case Kind::kFunctionCall:
      return json{{"id", item.id},     {"type", "function_call"},
                  {"call_id", item.call_id}, {"name", item.name},
                  {"arguments", item.done ? item.text : ""}, {"status", status}};
  }
  return json::object();
}

void ResponsesResponder::Append(Kind kind, const std::string& text, int call_index,
                                const std::string& name, std::vector<std::string>* events) {
  const bool same = open_ >= 0 && items_[open_].kind == kind &&
                    (kind != Kind::kFunctionCall || items_[open_].call_index == call_index);
  if (!same) {
    Close(events);
    Item item{.kind = kind};
    item.id = NewItemId(kind == Kind::kReasoning ? "rs" : kind == Kind::kMessage ? "msg" : "fc");
    if (kind == Kind::kFunctionCall) {
      item.call_id = NewItemId("call");
      item.call_index = call_index;
      item.name = name;
    }
    items_.push_back(std::move(item));
    open_ = static_cast<int>(items_.size()) - 1;
    if (events) {
      const Item& it = items_[open_];
      events->push_back(Event("response.output_item.added",
                              json{{"output_index", open_}, {"item", ItemJson(it)}}));
      if (kind == Kind::kReasoning) {
        events->push_back(Event("response.reasoning_part.added",
                                json{{"item_id", it.id},
                                     {"output_index", open_},
                                     {"content_index", 0},
                                     {"part", {{"type", "reasoning_text"}, {"text", ""}}}}));
      } else if (kind == Kind::kMessage) {
        events->push_back(Event("response.content_part.added",
                                json{{"item_id", it.id},
                                     {"output_index", open_},
                                     {"content_index", 0},
                                     {"part", {{"type", "output_text"},
                                               {"text", ""},
                                               {"annotations", json::array()},
                                               {"logprobs", json::array()}}}}));
      }
    }
  } else if (kind == Kind::kFunctionCall) {
    items_[open_].name += name;  // a name comes on a call's first piece only
  }
  if (text.empty()) return;
  Item& it = items_[open_];
  it.text += text;
  if (!events) return;
  switch (kind) {
    case Kind::kReasoning:
      events->push_back(Event("response.reasoning_text.delta",
                              json{{"item_id", it.id}, {"output_index", open_},
                                   {"content_index", 0}, {"delta", text}}));
      break;
    case Kind::kMessage:
      events->push_back(Event("response.output_text.delta",
                              json{{"item_id", it.id}, {"output_index", open_},
                                   {"content_index", 0}, {"delta", text},
                                   {"logprobs", json::array()}}));
      break;
    case Kind::kFunctionCall:
      events->push_back(Event("response.function_call_arguments.delta",
                              json{{"item_id", it.id}, {"output_index", open_},
                                   {"delta", text}}));
      break;
  }
}

void ResponsesResponder::Close(std::vector<std::string>* events) {
  if (open_ < 0) return;
  Item& it = items_[open_];
  it.done = true;
  const int index = open_;
  open_ = -1;
  if (!events) return;
  switch (it.kind) {
    case Kind::kReasoning: {
      json part{{"type", "reasoning_text"}, {"text", it.text}};
      events->push_back(Event("response.reasoning_text.done",
                              json{{"item_id", it.id}, {"output_index", index},
                                   {"content_index", 0}, {"text", it.text}}));
      events->push_back(Event("response.reasoning_part.done",
                              json{{"item_id", it.id}, {"output_index", index},
                                   {"content_index", 0}, {"part", std::move(part)}}));
      break;
    }
    case Kind::kMessage: {
      json part{{"type", "output_text"}, {"text", it.text}, {"annotations", json::array()},
                {"logprobs", json::array()}};
      events->push_back(Event("response.output_text.done",
                              json{{"item_id", it.id}, {"output_index", index},
                                   {"content_index", 0}, {"text", it.text},
                                   {"logprobs", json::array()}}));
      events->push_back(Event("response.content_part.done",
                              json{{"item_id", it.id}, {"output_index", index},
                                   {"content_index", 0}, {"part", std::move(part)}}));
      break;
    }
    case Kind::kFunctionCall:
      events->push_back(Event("response.function_call_arguments.done",
                              json{{"item_id", it.id}, {"output_index", index},
                                   {"name", it.name}, {"arguments", it.text}}));
      break;
  }
  events->push_back(Event("response.output_item.done",
                          json{{"output_index", index}, {"item", ItemJson(it)}}));
}

void ResponsesResponder::Consume(const GenerationEvent& event, std::vector<std::string>* events) {
  completion_count_ += static_cast<int>(event.token_ids.size());
  if (!parser_) {
    if (!event.text.empty()) Append(Kind::kMessage, event.text, -1, "", events);
    return;
  }
  auto route = [&](const ChatOutputParser::Delta& d) {
    if (!d.reasoning.empty()) Append(Kind::kReasoning, d.reasoning, -1, "", events);
    if (!d.content.empty()) Append(Kind::kMessage, d.content, -1, "", events);
    for (const auto& t : d.tool_calls) {
      Append(Kind::kFunctionCall, t.arguments, t.index, t.name, events);
    }
  };
  for (int32_t id : event.token_ids) {
    ChatOutputParser::Delta d = parser_->Push(id);
    if (!d.reasoning.empty()) ++reasoning_tokens_;
    route(d);
  }
  if (event.finished) route(parser_->Finish());
}

void ResponsesResponder::Finish(const GenerationEvent& event) {
  incomplete_ = event.finish_reason == FinishReason::kLength;
  if (incomplete_ && open_ >= 0) items_[open_].incomplete = true;  // cut off mid-item
  status_ = incomplete_ ? "incomplete"
            : event.finish_reason == FinishReason::kAbort ? "cancelled"
                                                           : "completed";
  usage_prompt_ = event.prompt_tokens > 0 ? event.prompt_tokens : prompt_tokens_;
  usage_completion_ = event.completion_tokens > 0 ? event.completion_tokens : completion_count_;
}

json ResponsesResponder::Response(const std::string& status) const {
  json r = head_;
  json output = json::array();
  for (const Item& it : items_) output.push_back(ItemJson(it));
  r["output"] = std::move(output);
  r["status"] = status;
  r["error"] = nullptr;
  r["incomplete_details"] =
      incomplete_ ? json{{"reason", "max_output_tokens"}} : json(nullptr);
  if (status == "in_progress") {
    r["usage"] = nullptr;
  } else {
    // The engine does not report prefix-cache hits per request: cached_tokens stays 0.
    r["usage"] = json{{"input_tokens", usage_prompt_},
                      {"input_tokens_details", {{"cached_tokens", 0}}},
                      {"output_tokens", usage_completion_},
                      {"output_tokens_details", {{"reasoning_tokens", reasoning_tokens_}}},
                      {"total_tokens", usage_prompt_ + usage_completion_}};
  }
  return r;
}

std::vector<std::string> ResponsesResponder::Chunks(const GenerationEvent& event) {
  std::vector<std::string> events;
  if (!started_) {
    started_ = true;
    const json initial = Response("in_progress");
    events.push_back(Event("response.created", json{{"response", initial}}));
    events.push_back(Event("response.in_progress", json{{"response", initial}}));
  }
  if (event.finish_reason == FinishReason::kError) {
    const absl::Status err = event.error.ok() ? absl::InternalError("generation failed")
                                              : event.error;
    const std::optional<std::string> param = ParamOf(err);
    events.push_back(Event("error", json{{"code", CodeOf(err).value_or(
                                                      std::string(OpenAiErrorType(err)))},
                                         {"message", std::string(err.message())},
                                         {"param", param ? json(*param) : json(nullptr)}}));
    return events;
  }
  Consume(event, &events);
  if (event.finished) {
    Finish(event);
    Close(&events);
    // As vLLM: response.completed ends every stream, its status saying how it ended.
    events.push_back(Event("response.completed", json{{"response", Response(status_)}}));
  }
  return events;
}

void ResponsesResponder::Add(const GenerationEvent& event) {
  Consume(event, nullptr);
  if (event.finished) {
    Finish(event);
    Close(nullptr);
  }
}

std::string ResponsesResponder::Body() const { return Dump(Response(status_)); }

}  // namespace mxserve::frontends
