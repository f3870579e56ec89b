#include "coordinator/engine/engine.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace mxserve {

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(EngineOptions options,
                                                       ModelRunner* runner,
                                                       const Tokenizer* tokenizer,
                                                       std::vector<int32_t> eos_ids) {
  if (runner == nullptr) return absl::InvalidArgumentError("runner: must not be null");
  if (runner->vocab_size() <= 0 || runner->block_size() <= 0 || runner->num_blocks() <= 0 ||
      runner->max_model_len() <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "runner: vocab_size (", runner->vocab_size(), "), block_size (", runner->block_size(),
        "), num_blocks (", runner->num_blocks(), ") and max_model_len (",
        runner->max_model_len(), ") must all be positive"));
  }
  SchedulerOptions& so = options.scheduler;
  if (so.max_num_seqs < 1) return absl::InvalidArgumentError("max_num_seqs: must be >= 1");
  if (so.max_num_batched_tokens < 1) {
    return absl::InvalidArgumentError("max_num_batched_tokens: must be >= 1");
  }
  if (so.max_num_batched_tokens < so.max_num_seqs) {
    // Otherwise some running sequences could miss their decode token step after step.
    return absl::InvalidArgumentError(absl::StrCat(
        "max_num_batched_tokens: ", so.max_num_batched_tokens, " is below max_num_seqs (",
        so.max_num_seqs, ")"));
  }
  if (so.max_waiting < 1) return absl::InvalidArgumentError("max_waiting: must be >= 1");
  if (so.max_model_len < 0) return absl::InvalidArgumentError("max_model_len: must be >= 0");
  if (so.max_model_len > runner->max_model_len()) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_model_len: ", so.max_model_len, " exceeds the model's ",
                     runner->max_model_len()));
  }
  int max_len = so.max_model_len > 0 ? so.max_model_len : runner->max_model_len();
  // One sequence alone must always fit in the KV pool, or it could never finish.
  const int64_t pool_tokens =
      static_cast<int64_t>(runner->num_blocks()) * runner->block_size();
  if (max_len > pool_tokens) {
    if (so.max_model_len > 0) {
      return absl::InvalidArgumentError(absl::StrCat("max_model_len: ", max_len,
                                                     " exceeds the KV cache's ", pool_tokens,
                                                     " tokens"));
    }
    max_len = static_cast<int>(pool_tokens);
  }
  so.max_model_len = max_len;
  for (size_t i = 0; i < eos_ids.size(); ++i) {
    if (eos_ids[i] < 0 || eos_ids[i] >= runner->vocab_size()) {
      return absl::InvalidArgumentError(absl::StrCat("eos_ids[", i, "]: ", eos_ids[i],
                                                     " outside the vocabulary"));
    }
  }
  std::unique_ptr<Engine> engine(
      new Engine(std::move(options), runner, tokenizer, std::move(eos_ids), max_len));
  if (engine->options_.start_loop) engine->loop_ = std::thread([e = engine.get()] { e->Loop(); });
  return engine;
}

Engine::Engine(EngineOptions options, ModelRunner* runner, const Tokenizer* tokenizer,
               std::vector<int32_t> eos_ids, int max_model_len)
    : options_(std::move(options)),
      runner_(runner),
      tokenizer_(tokenizer),
      max_model_len_(max_model_len),
      vocab_size_(runner->vocab_size()),
      scheduler_(options_.scheduler, runner->num_blocks(), runner->block_size(), eos_ids),
      sampler_(eos_ids),
      grammar_masks_(tokenizer, runner->vocab_size(), std::move(eos_ids)) {
  stats_.kv_blocks_total = runner->num_blocks();
  stats_.max_model_len = max_model_len;
  // The loop starts now: a health check before its first iteration must not see "never ran".
  stats_.loop_heartbeat = stats_.last_progress = absl::Now();
}

Engine::~Engine() { Shutdown(); }

absl::Status Engine::Validate(const GenerateRequest& r) const {
  const SamplingParams& p = r.params;
  if (r.prompt_tokens.empty()) return absl::InvalidArgumentError("prompt_tokens: must not be empty");
  for (size_t i = 0; i < r.prompt_tokens.size(); ++i) {
    if (r.prompt_tokens[i] < 0 || r.prompt_tokens[i] >= vocab_size_) {
      return absl::InvalidArgumentError(absl::StrCat("prompt_tokens[", i, "]: token id ",
                                                     r.prompt_tokens[i], " outside [0, ",
                                                     vocab_size_, ")"));
    }
  }
  if (p.max_tokens < 1) {
    return absl::InvalidArgumentError(absl::StrCat("max_tokens: must be >= 1, got ", p.max_tokens));
  }
  const int64_t total = static_cast<int64_t>(r.prompt_tokens.size()) + p.max_tokens;
  if (total > max_model_len_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_tokens: prompt (", r.prompt_tokens.size(), " tokens) + max_tokens (", p.max_tokens,
        ") exceeds max_model_len (", max_model_len_, ")"));
  }
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature)) {
    return absl::InvalidArgumentError(absl::StrCat("temperature: must be >= 0, got ", p.temperature));
  }
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) {
    return absl::InvalidArgumentError(absl::StrCat("top_p: must be in (0, 1], got ", p.top_p));
  }
  if (p.top_k < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("top_k: must be >= 0 (0 or -1 = off), got ", p.top_k));
  }
  if (p.logprobs < -1 || p.logprobs > 20) {
    return absl::InvalidArgumentError(absl::StrCat("logprobs: must be in [0, 20], got ", p.logprobs));
  }
  if (p.prompt_logprobs < -1 || p.prompt_logprobs > 20) {
    return absl::InvalidArgumentError(
        absl::StrCat("prompt_logprobs: must be in [0, 20], got ", p.prompt_logprobs));
  }
  for (size_t i = 0; i < p.stop.size(); ++i) {
    if (p.stop[i].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("stop[", i, "]: must not be empty"));
    }
    if (tokenizer_ == nullptr) {
      return absl::InvalidArgumentError("stop: stop strings need a tokenizer");
    }
  }
  RETURN_IF_ERROR(ValidateLogitsParams(p));
  if (p.grammar != nullptr && tokenizer_ == nullptr) {
    return absl::InvalidArgumentError("structured output needs a tokenizer");
  }
  for (size_t i = 0; i < p.stop_token_ids.size(); ++i) {
    if (p.stop_token_ids[i] < 0 || p.stop_token_ids[i] >= vocab_size_) {
      return absl::InvalidArgumentError(absl::StrCat("stop_token_ids[", i, "]: token id ",
                                                     p.stop_token_ids[i], " outside [0, ",
                                                     vocab_size_, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status Engine::ValidateLogitsParams(const SamplingParams& p) const {
  auto in = [](float v, float lo, float hi) { return v >= lo && v <= hi; };  // NaN: false
  if (!in(p.presence_penalty, -2, 2)) {
    return absl::InvalidArgumentError(
        absl::StrCat("presence_penalty: must be in [-2, 2], got ", p.presence_penalty));
  }
  if (!in(p.frequency_penalty, -2, 2)) {
    return absl::InvalidArgumentError(
        absl::StrCat("frequency_penalty: must be in [-2, 2], got ", p.frequency_penalty));
  }
  if (!(p.repetition_penalty > 0 && p.repetition_penalty <= 2)) {
    return absl::InvalidArgumentError(
        absl::StrCat("repetition_penalty: must be in (0, 2], got ", p.repetition_penalty));
  }
  if (!in(p.min_p, 0, 1)) {
    return absl::InvalidArgumentError(absl::StrCat("min_p: must be in [0, 1], got ", p.min_p));
  }
  if (p.min_tokens < 0 || p.min_tokens > p.max_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("min_tokens: must be in [0, max_tokens (",
                                                   p.max_tokens, ")], got ", p.min_tokens));
  }
  for (const auto& [id, bias] : p.logit_bias) {
    if (id < 0 || id >= vocab_size_) {
      return absl::InvalidArgumentError(absl::StrCat("logit_bias: token id ", id,
                                                     " outside [0, ", vocab_size_, ")"));
    }
    if (!in(bias, -100, 100)) {
      return absl::InvalidArgumentError(
          absl::StrCat("logit_bias: bias of token ", id, " must be in [-100, 100], got ", bias));
    }
  }
  if (!p.bad_words.empty() && tokenizer_ == nullptr) {
    return absl::InvalidArgumentError("bad_words: bad words need a tokenizer");
  }
  for (size_t i = 0; i < p.bad_words.size(); ++i) {
    if (absl::StripAsciiWhitespace(p.bad_words[i]).empty()) {
      return absl::InvalidArgumentError(absl::StrCat("bad_words[", i, "]: must not be blank"));
    }
  }
  return absl::OkStatus();
}

absl::Status Engine::Submit(GenerateRequest request, EventCallback callback) {
  if (!callback) return absl::InvalidArgumentError("callback: must be set");
  RETURN_IF_ERROR(Validate(request));
  absl::MutexLock lock(&mu_);
  if (stopping_) return absl::UnavailableError("engine is shutting down");
  if (!not_accepting_.empty()) {
    if (options_.observer != nullptr) options_.observer->OnRejected("draining");
    return absl::UnavailableError(not_accepting_);
  }
  if (!request.request_id.empty() && live_ids_.count(request.request_id) > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("request_id: '", request.request_id, "' is already in flight"));
  }
  const int64_t queued = static_cast<int64_t>(inbox_.size()) + stats_.num_waiting;
  if (queued >= options_.scheduler.max_waiting) {
    if (options_.observer != nullptr) options_.observer->OnRejected("queue_full");
    return absl::ResourceExhaustedError(absl::StrCat(
        "queue full: ", queued, " requests waiting (max_waiting ", options_.scheduler.max_waiting,
        ")"));
  }
  if (!request.request_id.empty()) live_ids_.insert(request.request_id);
  // Work arriving at an idle engine starts the progress clock (health: "is it stepping?").
  if (pending_ == 0) stats_.last_progress = absl::Now();
  ++pending_;
  inbox_.push_back(std::make_shared<Sequence>(next_seq_id_++, std::move(request),
                                              std::move(callback), tokenizer_));
  work_cv_.Signal();
  return absl::OkStatus();
}

void Engine::Cancel(const std::string& request_id) {
  absl::MutexLock lock(&mu_);
  if (live_ids_.count(request_id) == 0) return;
  cancels_.push_back(request_id);
  work_cv_.Signal();
}

bool Engine::Step() {
  DrainInbox();
  ScheduledBatch batch = scheduler_.Schedule();
  if (batch.empty()) {
    UpdateStats(nullptr, /*ok=*/true);
    return false;
  }
  const absl::Time start = absl::Now();
  {
    absl::MutexLock lock(&mu_);
    stats_.in_step = true;
    stats_.step_started = start;
  }
  grammar_masks_.Start(batch);  // on a worker thread, while the forward pass runs
  absl::StatusOr<ForwardOutput> out = RunBatch(batch.forward);
  const TokenMasks masks = grammar_masks_.Wait();
  absl::StatusOr<std::vector<SampledChunk>> sampled =
      out.ok() ? sampler_.Sample(batch, *out, masks) : out.status();
  std::vector<StepOutput> events = sampled.ok()
                                       ? scheduler_.Postprocess(batch, *sampled)
                                       : scheduler_.FailBatch(batch, sampled.status());
  UpdateStats(&batch, sampled.ok());
  Emit(std::move(events));
  if (options_.observer != nullptr) {
    StepRecord rec;
    rec.duration = absl::Now() - start;
    rec.num_tokens = batch.num_batched_tokens;
    rec.num_seqs = static_cast<int>(batch.seqs.size());
    for (size_t i = 0; i < batch.seqs.size(); ++i) {
      const int n = static_cast<int>(batch.forward.chunks[i].tokens.size());
      if (batch.seqs[i].sample && n == 1) {
        rec.num_decode_tokens += n;
      } else {
        rec.num_prefill_tokens += n;
      }
    }
    rec.ok = sampled.ok();
    options_.observer->OnStep(rec);
  }
  return true;
}

absl::StatusOr<ForwardOutput> Engine::RunBatch(const ForwardBatch& batch) {
  // A throwing runner must not take the engine (and every other request) down with it.
  try {
    return runner_->Run(batch);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("model runner threw: ", e.what()));
  } catch (...) {
    return absl::InternalError("model runner threw");
  }
}

void Engine::DrainInbox() {
  std::deque<std::shared_ptr<Sequence>> inbox;
  std::vector<std::string> cancels;
  absl::Status fail_all;
  {
    absl::MutexLock lock(&mu_);
    inbox.swap(inbox_);
    // The moved requests join the scheduler's waiting queue below, outside the lock: count them
    // as waiting now, or Submit would see neither inbox nor waiting and overrun max_waiting
    // until UpdateStats catches up.
    stats_.num_waiting += static_cast<int>(inbox.size());
    cancels.swap(cancels_);
    fail_all.Update(fail_all_);
    fail_all_ = absl::OkStatus();
  }
  for (std::shared_ptr<Sequence>& seq : inbox) scheduler_.Add(std::move(seq));
  std::vector<StepOutput> aborted;
  for (const std::string& id : cancels) {
    if (std::optional<StepOutput> o = scheduler_.Abort(id)) aborted.push_back(std::move(*o));
  }
  if (!fail_all.ok()) {
    for (StepOutput& o : scheduler_.AbortAll()) {
      o.event.finish_reason = FinishReason::kError;
      o.event.error = fail_all;
      aborted.push_back(std::move(o));
    }
  }
  if (!inbox.empty() || !aborted.empty()) UpdateStats(nullptr, /*ok=*/true);
  Emit(std::move(aborted));
}

void Engine::Emit(std::vector<StepOutput> outputs) {
  if (outputs.empty()) return;
  {
    absl::MutexLock lock(&mu_);
    for (const StepOutput& o : outputs) {
      if (!o.event.finished) continue;
      if (!o.seq->request_id().empty()) live_ids_.erase(o.seq->request_id());
      --pending_;
    }
  }
  if (options_.observer != nullptr) {
    const absl::Time now = absl::Now();
    for (const StepOutput& o : outputs) Observe(*o.seq, o.event, now);
  }
  for (StepOutput& o : outputs) o.seq->callback()(std::move(o.event));
}

void Engine::Observe(const Sequence& seq, const GenerationEvent& ev, absl::Time now) {
  EngineObserver* obs = options_.observer;
  const int n = static_cast<int>(ev.token_ids.size());
  auto it = last_token_at_.find(seq.seq_id());
  const bool had_first = it != last_token_at_.end();
  if (n > 0) {
    if (!had_first) {
      obs->OnFirstToken(now - seq.arrival_time(), seq.num_prompt_tokens());
      if (n > 1) obs->OnNextTokens(n - 1, absl::ZeroDuration());
      last_token_at_[seq.seq_id()] = now;
    } else {
      obs->OnNextTokens(n, now - it->second);
      it->second = now;
    }
  }
  if (ev.finished) {
    FinishedRequest f;
    f.reason = ev.finish_reason;
    f.prompt_tokens = seq.num_prompt_tokens();
    f.generation_tokens = seq.num_output_tokens();
    f.e2e = now - seq.arrival_time();
    f.had_first_token = had_first || n > 0;
    last_token_at_.erase(seq.seq_id());
    obs->OnRequestFinished(f);
  }
}

void Engine::UpdateStats(const ScheduledBatch* batch, bool ok) {
  absl::MutexLock lock(&mu_);
  stats_.num_running = scheduler_.num_running();
  stats_.num_waiting = scheduler_.num_waiting();
  stats_.num_preemptions = scheduler_.num_preemptions();
  stats_.prefix_cache_queries = scheduler_.prefix_cache_queries();
  stats_.prefix_cache_hits = scheduler_.prefix_cache_hits();
  stats_.kv_blocks_used = scheduler_.block_manager().num_used_blocks();
  scheduler_busy_ = scheduler_.HasWork();
  if (batch == nullptr) return;
  stats_.in_step = false;
  stats_.last_progress = absl::Now();
  ++stats_.num_steps;
  if (!ok) {
    ++stats_.num_failed_steps;
    return;
  }
  for (size_t i = 0; i < batch->seqs.size(); ++i) {
    if (batch->seqs[i].sample) ++stats_.num_generated_tokens;
    if (!(batch->seqs[i].sample && batch->forward.chunks[i].tokens.size() == 1)) {
      stats_.num_prompt_tokens_computed +=
          static_cast<int64_t>(batch->forward.chunks[i].tokens.size());
    }
  }
}

EngineStats Engine::stats() const {
  absl::MutexLock lock(&mu_);
  EngineStats s = stats_;
  s.num_waiting += static_cast<int>(inbox_.size());
  return s;
}

void Engine::StopAccepting(std::string reason) {
  absl::MutexLock lock(&mu_);
  not_accepting_ = reason.empty() ? "not accepting requests" : std::move(reason);
  stats_.accepting = false;
}

void Engine::FailAll(absl::Status error) {
  if (error.ok()) error = absl::UnavailableError("request aborted");
  absl::MutexLock lock(&mu_);
  fail_all_ = std::move(error);
  work_cv_.Signal();
}

bool Engine::HasPendingRequests() const {
  absl::MutexLock lock(&mu_);
  return pending_ > 0;
}

void Engine::Loop() {
  bool progressed = true;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      stats_.loop_heartbeat = absl::Now();
      if (!stopping_ && inbox_.empty() && cancels_.empty() && fail_all_.ok()) {
        if (!scheduler_busy_) {
          // Idle: wake at least every tick_interval so on_loop_tick (the watchdog) still runs.
          const absl::Time until = absl::Now() + options_.tick_interval;
          while (!stopping_ && inbox_.empty() && cancels_.empty() && fail_all_.ok()) {
            if (work_cv_.WaitWithDeadline(&mu_, until)) break;
          }
        } else if (!progressed) {
          // Work exists but nothing could be scheduled (should not happen: a lone sequence
          // always fits); back off instead of spinning.
          work_cv_.WaitWithTimeout(&mu_, absl::Milliseconds(5));
        }
      }
      if (stopping_) return;
      stats_.loop_heartbeat = absl::Now();
    }
    if (options_.on_loop_tick) options_.on_loop_tick();
    progressed = Step();
  }
}

void Engine::Shutdown() {
  absl::MutexLock shutdown_lock(&shutdown_mu_);
  if (joined_) return;
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
    work_cv_.SignalAll();
  }
  if (loop_.joinable()) loop_.join();
  joined_ = true;
  DrainInbox();
  Emit(scheduler_.AbortAll());
  UpdateStats(nullptr, /*ok=*/true);
}

}  // namespace mxserve
