#include "coordinator/engine/sequence.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace mxserve {
namespace {

uint64_t SeedFor(const SamplingParams& p) {
  if (p.seed.has_value()) return *p.seed;
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

bool Contains(const std::vector<int32_t>& v, int32_t x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

std::vector<std::vector<int32_t>> BadWordsTokenIds(const std::vector<std::string>& words,
                                                   const Tokenizer& tok) {
  // As vLLM's SamplingParams.update_from_tokenizer: each word as written (leading blanks
  // stripped) and with one leading space, the latter kept only when it tokenizes to as many
  // tokens with a different first token.
  std::vector<std::vector<int32_t>> out;
  for (const std::string& word : words) {
    const std::string stripped(absl::StripLeadingAsciiWhitespace(word));
    std::vector<int32_t> plain = tok.Encode(stripped, /*allow_special=*/false);
    std::vector<int32_t> spaced = tok.Encode(" " + stripped, /*allow_special=*/false);
    if (!plain.empty()) out.push_back(plain);
    if (!spaced.empty() &&
        (plain.empty() || (spaced[0] != plain[0] && spaced.size() == plain.size()))) {
      out.push_back(std::move(spaced));
    }
  }
  return out;
}

Sequence::Sequence(int64_t seq_id, GenerateRequest request, EventCallback callback,
                   const Tokenizer* tok)
    : seq_id_(seq_id),
      request_id_(std::move(request.request_id)),
      params_(std::move(request.params)),
      callback_(std::move(callback)),
      tok_(tok),
      tokens_(std::move(request.prompt_tokens)),
      num_prompt_tokens_(static_cast<int>(tokens_.size())),
      rng_(SeedFor(params_)),
      arrival_time_(absl::Now()) {
  // Output text skips special tokens unless asked (vLLM's skip_special_tokens, default true).
  if (tok_ != nullptr) detok_.emplace(tok_, params_.skip_special_tokens);
  if (params_.repetition_penalty != 1.0f) {
    prompt_token_set_ = tokens_;
    std::sort(prompt_token_set_.begin(), prompt_token_set_.end());
    prompt_token_set_.erase(std::unique(prompt_token_set_.begin(), prompt_token_set_.end()),
                            prompt_token_set_.end());
  }
  if (tok_ != nullptr) bad_words_ids_ = BadWordsTokenIds(params_.bad_words, *tok_);
  if (params_.grammar != nullptr) matcher_.emplace(params_.grammar);
  for (const std::string& s : params_.stop) max_stop_len_ = std::max(max_stop_len_, s.size());
  if (params_.prompt_logprobs >= 0 && !tokens_.empty()) {
    // The first prompt token has no context to be predicted from.
    prompt_logprobs_.push_back(
        TokenLogprob{tokens_[0], std::numeric_limits<float>::quiet_NaN(), {}});
  }
}

bool Sequence::WantsPromptLogprobs() const {
  return params_.prompt_logprobs >= 0 && !prompt_logprobs_sent_ &&
         num_prompt_logprobs() < num_prompt_tokens_;
}

std::string Sequence::DetokenizeNext(int32_t token) {
  return detok_.has_value() ? detok_->Push(token) : std::string();
}

std::string Sequence::FlushDetokenizer() {
  return detok_.has_value() ? detok_->Flush() : std::string();
}

bool Sequence::MatchStopString(size_t old_size) {
  if (max_stop_len_ == 0 || num_output_tokens() <= params_.min_tokens) return false;
  size_t start = old_size >= max_stop_len_ - 1 ? old_size - (max_stop_len_ - 1) : 0;
  start = std::max(start, emitted_bytes_);
  size_t best = std::string::npos;
  const std::string* which = nullptr;
  for (const std::string& s : params_.stop) {
    if (s.empty()) continue;
    const size_t pos = text_.find(s, start);
    if (pos != std::string::npos && (best == std::string::npos || pos < best)) {
      best = pos;
      which = &s;
    }
  }
  if (which == nullptr) return false;
  text_.resize(params_.include_stop_str_in_output ? best + which->size() : best);
  matched_stop_ = *which;
  return true;
}

size_t Sequence::HeldBackBytes() const {
  size_t held = 0;
  const size_t unsent = text_.size() - emitted_bytes_;
  for (const std::string& s : params_.stop) {
    const size_t max_k = std::min(s.size() - (s.empty() ? 0 : 1), unsent);
    for (size_t k = max_k; k > held; --k) {
      if (text_.compare(text_.size() - k, k, s, 0, k) == 0) {
        held = k;
        break;
      }
    }
  }
  return held;
}

void Sequence::FillFinal(GenerationEvent* ev, FinishReason reason) {
  status_ = SequenceStatus::kFinished;
  finish_reason_ = reason;
  finish_time_ = absl::Now();
  ev->finished = true;
  ev->finish_reason = reason;
  ev->prompt_tokens = num_prompt_tokens_;
  ev->completion_tokens = num_output_tokens();
}

GenerationEvent Sequence::AppendToken(int32_t token, std::optional<TokenLogprob> logprob,
                                      const std::vector<int32_t>& eos_ids, int max_model_len) {
  GenerationEvent ev;
  tokens_.push_back(token);
  if (!first_token_time_) first_token_time_ = absl::Now();
  ev.token_ids.push_back(token);
  if (params_.logprobs >= 0 && logprob.has_value()) ev.logprobs.push_back(std::move(*logprob));
  if (params_.prompt_logprobs >= 0 && !prompt_logprobs_sent_) {
    ev.prompt_logprobs = std::move(prompt_logprobs_);
    prompt_logprobs_.clear();
    prompt_logprobs_sent_ = true;
  }

  ++output_counts_[token];

  FinishReason reason = FinishReason::kNone;
  const size_t old_size = text_.size();
  // As vLLM: no stop token before min_tokens, no stop string until past it.
  const bool may_stop = num_output_tokens() >= params_.min_tokens;
  const bool is_eos = may_stop && !params_.ignore_eos && Contains(eos_ids, token);
  const bool is_stop_token = may_stop && Contains(params_.stop_token_ids, token);
  if (matcher_.has_value() && !((is_eos || is_stop_token) && matcher_->accepting())) {
    // The mask allowed only what the grammar takes; anything else is a runner or sampler bug.
    absl::StatusOr<std::string> bytes =
        tok_ != nullptr ? tok_->DecodeBytes(std::span<const int32_t>(&token, 1), false)
                        : absl::FailedPreconditionError("no tokenizer");
    if (!bytes.ok() || tok_->IsSpecial(token) || !matcher_->Accept(*bytes)) {
      ev.error = absl::InternalError(absl::StrCat("token ", token, " does not continue the ",
                                                  "request's structured output grammar"));
      FillFinal(&ev, FinishReason::kError);
      return ev;
    }
  }
  if (is_eos || is_stop_token) {
    // The stop token's own text is not part of the output unless include_stop_str_in_output
    // (as vLLM does).
    reason = FinishReason::kStop;
    if (!is_eos) ev.stop_reason = std::to_string(token);
    if (params_.include_stop_str_in_output) text_ += DetokenizeNext(token);
    text_ += FlushDetokenizer();
    if (MatchStopString(old_size)) ev.stop_reason = matched_stop_;
  } else {
    text_ += DetokenizeNext(token);
    if (MatchStopString(old_size)) {
      reason = FinishReason::kStop;
      ev.stop_reason = matched_stop_;
    } else if (matcher_.has_value() && matcher_->terminated()) {
      reason = FinishReason::kStop;  // the grammar is complete and nothing may follow
      text_ += FlushDetokenizer();
    } else if (num_output_tokens() >= params_.max_tokens || num_tokens() >= max_model_len) {
      reason = FinishReason::kLength;
      text_ += FlushDetokenizer();
      if (MatchStopString(old_size)) {
        reason = FinishReason::kStop;
        ev.stop_reason = matched_stop_;
      }
    }
  }

  const size_t safe_end = reason != FinishReason::kNone ? text_.size()
                                                         : text_.size() - HeldBackBytes();
  if (safe_end > emitted_bytes_) {
    ev.text = text_.substr(emitted_bytes_, safe_end - emitted_bytes_);
    emitted_bytes_ = safe_end;
  }
  if (reason != FinishReason::kNone) FillFinal(&ev, reason);
  return ev;
}

GenerationEvent Sequence::Finish(FinishReason reason, absl::Status error) {
  GenerationEvent ev;
  ev.error = std::move(error);
  FillFinal(&ev, reason);
  return ev;
}

}  // namespace mxserve
