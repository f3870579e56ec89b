// Fakes for front-door tests: a byte-level tokenizer with three special tokens, a chat template
// whose parser splits <|think|>…<|answer|> into reasoning and content, and a GenerationService
// that records requests and plays scripted events from its own "engine" thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/chat/chat_template.h"
#include "coordinator/engine/request.h"
#include "coordinator/tokenizer/tokenizer.h"

namespace mxserve::testing {

// Ids 0..255 are bytes; 256 <|end|>, 257 <|think|>, 258 <|answer|>, 259 <|call|>; vocab 300.
class FakeTokenizer : public Tokenizer {
 public:
  static constexpr int32_t kEnd = 256, kThink = 257, kAnswer = 258, kCall = 259;
  std::vector<int32_t> Encode(std::string_view text, bool allow_special) const override {
    {
      std::unique_lock<std::mutex> lock(gate_mu_);
      ++encode_calls_;
      ++encode_waiting_;
      gate_cv_.wait(lock, [this] { return !hold_encode_; });
      --encode_waiting_;
    }
    std::vector<int32_t> out;
    for (size_t i = 0; i < text.size();) {
      bool matched = false;
      if (allow_special) {
        for (int32_t id = kEnd; id <= kCall; ++id) {
          const std::string& s = Special(id);
          if (text.substr(i, s.size()) == s) {
            out.push_back(id);
            i += s.size();
            matched = true;
            break;
          }
        }
      }
      if (!matched) out.push_back(static_cast<unsigned char>(text[i++]));
    }
    return out;
  }
  absl::StatusOr<std::string> DecodeBytes(std::span<const int32_t> ids,
                                          bool skip_special) const override {
    std::string out;
    for (int32_t id : ids) {
      if (id < 0 || id >= vocab_size()) return absl::InvalidArgumentError(absl::StrCat("bad id ", id));
      if (id < 256) {
        out += static_cast<char>(id);
      } else if (!skip_special) {
        out += Special(id);
      }
    }
    return out;
  }
  absl::StatusOr<std::string> Decode(std::span<const int32_t> ids,
                                     bool skip_special) const override {
    return DecodeBytes(ids, skip_special);
  }
  std::string TokenString(int32_t id) const override {
    if (id >= 0 && id < 256) return std::string(1, static_cast<char>(id));
    return Special(id);
  }
  int vocab_size() const override { return 300; }
  std::optional<int32_t> SpecialTokenId(std::string_view content) const override {
    for (int32_t id = kEnd; id <= kCall; ++id) {
      if (Special(id) == content) return id;
    }
    return std::nullopt;
  }
  bool IsSpecial(int32_t id) const override { return id >= 256; }
  std::optional<int32_t> eos_token_id() const override { return kEnd; }
  std::optional<int32_t> bos_token_id() const override { return std::nullopt; }

  // While held, Encode blocks (a stand-in for a slow tokenization); counts calls and waiters.
  void HoldEncode(bool hold) {
    {
      std::lock_guard<std::mutex> lock(gate_mu_);
      hold_encode_ = hold;
    }
    gate_cv_.notify_all();
  }
  int encode_waiting() const {
    std::lock_guard<std::mutex> lock(gate_mu_);
    return encode_waiting_;
  }
  int encode_calls() const {
    std::lock_guard<std::mutex> lock(gate_mu_);
    return encode_calls_;
  }

  static const std::string& Special(int32_t id) {
    static const std::string kNames[] = {"<|end|>", "<|think|>", "<|answer|>", "<|call|>",
                                         "<|unused|>"};
    return kNames[id >= kEnd && id <= kCall ? id - kEnd : 4];
  }

 private:
  mutable std::mutex gate_mu_;
  mutable std::condition_variable gate_cv_;
  bool hold_encode_ = false;
  mutable int encode_waiting_ = 0;
  mutable int encode_calls_ = 0;
};

// <|think|> starts reasoning, <|answer|> content; <|call|> starts tool call "lookup" (index 0,
// then 1, ...) whose arguments are the bytes that follow.
class FakeChatParser : public ChatOutputParser {
 public:
  Delta Push(int32_t id) override {
    Delta d;
    if (id == FakeTokenizer::kThink) {
      mode_ = kReasoning;
    } else if (id == FakeTokenizer::kAnswer) {
      mode_ = kContent;
    } else if (id == FakeTokenizer::kCall) {
      mode_ = kCallArgs;
      d.tool_calls.push_back({++call_, "lookup", ""});
    } else if (id < 256) {
      std::string b(1, static_cast<char>(id));
      if (mode_ == kReasoning) d.reasoning = b;
      if (mode_ == kContent) d.content = b;
      if (mode_ == kCallArgs) d.tool_calls.push_back({call_, "", b});
    }
    return d;
  }
  Delta Finish() override { return {}; }

 private:
  enum Mode { kContent, kReasoning, kCallArgs } mode_ = kContent;
  int call_ = -1;
};

// Renders "role:content\n" per message, then "assistant:".
class FakeChatTemplate : public ChatTemplate {
 public:
  absl::StatusOr<std::string> Render(const std::vector<ChatMessage>& messages,
                                     const ChatRenderOptions& options) const override {
    std::string out;
    for (const auto& m : messages) absl::StrAppend(&out, m.role, ":", m.content, "\n");
    if (options.add_generation_prompt) out += "assistant:";
    std::lock_guard<std::mutex> lock(mu_);  // I/O threads render concurrently
    last_effort_ = options.reasoning_effort;
    last_tools_json_ = options.tools_json;
    last_messages_ = messages;
    return out;
  }
  // No special tokens of its own, so message text never becomes special ids.
  absl::StatusOr<std::vector<int32_t>> RenderIds(const std::vector<ChatMessage>& messages,
                                                 const ChatRenderOptions& options) const override {
    auto text = Render(messages, options);
    if (!text.ok()) return text.status();
    return tok.Encode(*text, /*allow_special=*/false);
  }
  std::vector<int32_t> StopTokenIds() const override { return {FakeTokenizer::kEnd}; }
  std::unique_ptr<ChatOutputParser> NewParser() const override {
    return std::make_unique<FakeChatParser>();
  }
  std::string last_effort() const { std::lock_guard<std::mutex> l(mu_); return last_effort_; }
  std::string last_tools_json() const {
    std::lock_guard<std::mutex> l(mu_);
    return last_tools_json_;
  }
  std::vector<ChatMessage> last_messages() const {
    std::lock_guard<std::mutex> l(mu_);
    return last_messages_;
  }
  FakeTokenizer tok;

 private:
  mutable std::mutex mu_;
  mutable std::string last_effort_;
  mutable std::string last_tools_json_;
  mutable std::vector<ChatMessage> last_messages_;
};

// Records every request; answers each with Script(request), one event at a time, from its own
// thread. With hold_after_first set, only the first event is sent until Release().
class FakeGenerationService : public GenerationService {
 public:
  using Script = std::function<std::vector<GenerationEvent>(const GenerateRequest&)>;

  FakeGenerationService() : thread_([this] { Loop(); }) {}
  ~FakeGenerationService() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  // Default script: the tokens of `text` one per event (up to max_tokens), then finished.
  static std::vector<GenerationEvent> TextScript(const GenerateRequest& req,
                                                 const std::vector<int32_t>& tokens) {
    std::vector<GenerationEvent> evs;
    const int n = std::min<int>(tokens.size(), req.params.max_tokens);
    for (int i = 0; i < n; ++i) {
      GenerationEvent e;
      e.token_ids = {tokens[i]};
      if (tokens[i] < 256) e.text = std::string(1, static_cast<char>(tokens[i]));
      if (req.params.logprobs >= 0) {
        TokenLogprob lp{tokens[i], -0.5f * (i + 1), {}};
        for (int k = 0; k < req.params.logprobs; ++k) lp.top.push_back({'a' + k, -0.1f * (k + 1)});
        e.logprobs.push_back(lp);
      }
      if (i == 0 && req.params.prompt_logprobs >= 0) {
        for (size_t p = 0; p < req.prompt_tokens.size(); ++p) {
          TokenLogprob lp{req.prompt_tokens[p], p == 0 ? NAN : -1.0f * p, {}};
          if (p > 0) {
            for (int k = 0; k < req.params.prompt_logprobs; ++k) lp.top.push_back({'a' + k, -0.2f});
          }
          e.prompt_logprobs.push_back(lp);
        }
      }
      evs.push_back(std::move(e));
    }
    GenerationEvent fin;
    fin.finished = true;
    fin.finish_reason = n < static_cast<int>(tokens.size()) ? FinishReason::kLength
                                                            : FinishReason::kStop;
    fin.prompt_tokens = static_cast<int>(req.prompt_tokens.size());
    fin.completion_tokens = n;
    evs.push_back(std::move(fin));
    return evs;
  }

  absl::Status Submit(GenerateRequest request, EventCallback callback) override {
    std::lock_guard<std::mutex> lock(mu_);
    requests_.push_back(request);
    if (!next_status_.ok()) return next_status_;
    std::vector<GenerationEvent> evs =
        script_ ? script_(request)
                : TextScript(request, std::vector<int32_t>{'H', 'e', 'l', 'l', 'o', '!'});
    Pending p{std::move(callback), std::deque<GenerationEvent>(evs.begin(), evs.end())};
    if (hold_after_first_) {
      if (!p.events.empty()) {
        GenerationEvent first = std::move(p.events.front());
        p.events.pop_front();
        tasks_.push_back([cb = p.callback, first]() mutable { cb(std::move(first)); });
      }
      held_[request.request_id] = std::move(p);
    } else {
      for (auto& e : p.events) {
        tasks_.push_back([cb = p.callback, e]() mutable { cb(std::move(e)); });
      }
    }
    cv_.notify_all();
    return absl::OkStatus();
  }

  void Cancel(const std::string& request_id) override {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_.insert(request_id);
    auto it = held_.find(request_id);
    if (it == held_.end()) return;
    GenerationEvent abort;
    abort.finished = true;
    abort.finish_reason = FinishReason::kAbort;
    tasks_.push_back([cb = it->second.callback, abort]() mutable { cb(std::move(abort)); });
    held_.erase(it);
    cv_.notify_all();
  }

  // Sends the rest of every held request's events.
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, p] : held_) {
      for (auto& e : p.events) tasks_.push_back([cb = p.callback, e]() mutable { cb(std::move(e)); });
    }
    held_.clear();
    cv_.notify_all();
  }

  void set_script(Script s) { std::lock_guard<std::mutex> l(mu_); script_ = std::move(s); }
  void set_next_status(absl::Status s) { std::lock_guard<std::mutex> l(mu_); next_status_ = s; }
  void set_hold_after_first(bool h) { std::lock_guard<std::mutex> l(mu_); hold_after_first_ = h; }
  std::vector<GenerateRequest> requests() const { std::lock_guard<std::mutex> l(mu_); return requests_; }
  size_t num_requests() const { std::lock_guard<std::mutex> l(mu_); return requests_.size(); }
  size_t num_held() const { std::lock_guard<std::mutex> l(mu_); return held_.size(); }
  std::set<std::string> cancelled() const { std::lock_guard<std::mutex> l(mu_); return cancelled_; }

 private:
  struct Pending {
    EventCallback callback;
    std::deque<GenerationEvent> events;
  };
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
      if (stop_) return;
      auto t = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      t();
      lock.lock();
    }
  }

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::deque<std::function<void()>> tasks_;
  std::map<std::string, Pending> held_;
  std::vector<GenerateRequest> requests_;
  std::set<std::string> cancelled_;
  absl::Status next_status_;
  Script script_;
  bool hold_after_first_ = false;
  std::thread thread_;
};

}  // namespace mxserve::testing
