#include "coordinator/engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "absl/strings/str_cat.h"

namespace mxserve {
namespace {

// Descending by value, ascending id on ties: the one order every choice here uses.
struct ByLogitDesc {
  std::span<const float> v;
  bool operator()(int32_t a, int32_t b) const {
    return v[a] > v[b] || (v[a] == v[b] && a < b);
  }
};

}  // namespace

int32_t Sampler::Argmax(std::span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
  }
  return best;
}

std::vector<std::pair<int32_t, double>> Sampler::FilteredDistribution(
    std::span<const float> logits, const SamplingParams& params) {
  const int vocab = static_cast<int>(logits.size());
  const ByLogitDesc order{logits};
  std::vector<int32_t> ids(vocab);
  std::iota(ids.begin(), ids.end(), 0);
  double max_logit = logits[0];
  for (float l : logits) max_logit = std::max<double>(max_logit, l);
  const double t = params.temperature;
  auto weight = [&](int32_t id) { return std::exp((logits[id] - max_logit) / t); };

  // min_p: only tokens whose probability is at least min_p times the top one's (weight is
  // p / p_max) stay; they are a prefix of the sorted order, as are top_k's candidates.
  int limit = (params.top_k > 0 && params.top_k < vocab) ? params.top_k : vocab;
  if (params.min_p > 0) {
    int kept = 0;
    for (int32_t id = 0; id < vocab; ++id) kept += weight(id) >= params.min_p ? 1 : 0;
    limit = std::min(limit, std::max(kept, 1));
  }
  // top_k: the candidates are the k largest logits (temperature does not change the order),
  // and the distribution is renormalized over them.
  int sorted = 0;
  double z = 0;
  if (limit < vocab) {
    std::partial_sort(ids.begin(), ids.begin() + limit, ids.end(), order);
    sorted = limit;
    for (int i = 0; i < limit; ++i) z += weight(ids[i]);
  } else {
    for (int32_t id = 0; id < vocab; ++id) z += weight(id);
  }

  // top_p: the smallest prefix of the sorted candidates whose mass reaches top_p. The nucleus
  // is usually tiny, so sort a growing prefix instead of the whole vocabulary.
  int n = limit;
  double mass = 1.0;
  if (params.top_p < 1.0f) {
    double cum = 0;
    n = 0;
    for (int k = std::min(limit, 64);; k = std::min(limit, k * 16)) {
      if (sorted < k) {
        std::partial_sort(ids.begin(), ids.begin() + k, ids.begin() + limit, order);
        sorted = k;
      }
      while (n < k && cum < params.top_p) cum += weight(ids[n++]) / z;
      if (cum >= params.top_p || k == limit) break;
    }
    mass = cum;
  } else if (sorted < limit) {
    std::sort(ids.begin(), ids.begin() + limit, order);
  }
  std::vector<std::pair<int32_t, double>> dist;
  dist.reserve(n);
  for (int i = 0; i < n; ++i) dist.emplace_back(ids[i], weight(ids[i]) / z / mass);
  return dist;
}

int32_t Sampler::SampleRow(std::span<const float> logits, const SamplingParams& params,
                           std::mt19937_64& rng) {
  if (params.temperature == 0.0f) return Argmax(logits);
  // Exactly one draw per sampled token keeps a seeded stream independent of everything else.
  const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
  if (params.top_k <= 0 && params.top_p >= 1.0f && params.min_p <= 0) {
    // No filtering: walk the softmax in id order; no sort needed.
    double max_logit = logits[0];
    for (float l : logits) max_logit = std::max<double>(max_logit, l);
    double total = 0;
    std::vector<double> p(logits.size());
    for (size_t i = 0; i < logits.size(); ++i) {
      p[i] = std::exp((static_cast<double>(logits[i]) - max_logit) / params.temperature);
      total += p[i];
    }
    double target = u * total, cum = 0;
    for (size_t i = 0; i < p.size(); ++i) {
      cum += p[i];
      if (target < cum) return static_cast<int32_t>(i);
    }
    return Argmax(logits);  // rounding left u at the very end
  }
  const auto dist = FilteredDistribution(logits, params);
  double cum = 0;
  for (const auto& [id, p] : dist) {
    cum += p;
    if (u < cum) return id;
  }
  return dist.back().first;
}

bool Sampler::NeedsProcessing(const Sequence& seq) {
  return seq.params().ChangesGreedyChoice(seq.num_output_tokens());
}

void Sampler::ProcessLogits(std::span<float> logits, const Sequence& seq,
                            const std::vector<int32_t>& eos_ids) {
  const SamplingParams& p = seq.params();
  const int vocab = static_cast<int>(logits.size());
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const std::vector<int32_t>& tokens = seq.tokens();
  const int out_len = seq.num_output_tokens();
  // Bad words: a one-token word always; a longer one when the output ends with its prefix.
  for (const std::vector<int32_t>& w : seq.bad_words_ids()) {
    const int prefix = static_cast<int>(w.size()) - 1;
    if (prefix > out_len || w.back() < 0 || w.back() >= vocab) continue;
    if (std::equal(w.begin(), w.end() - 1, tokens.end() - prefix)) logits[w.back()] = kNegInf;
  }
  if (out_len < p.min_tokens) {
    if (!p.ignore_eos) {
      for (int32_t id : eos_ids) logits[id] = kNegInf;
    }
    for (int32_t id : p.stop_token_ids) logits[id] = kNegInf;
  }
  for (const auto& [id, bias] : p.logit_bias) logits[id] += bias;
  if (p.repetition_penalty != 1.0f) {
    const float r = p.repetition_penalty;
    // vLLM's apply_penalties: logits *= (logit > 0 ? 1 / r : r).
    const float inv = 1.0f / r;
    auto penalize = [&](int32_t id) { logits[id] *= logits[id] > 0 ? inv : r; };
    for (int32_t id : seq.prompt_token_set()) penalize(id);
    for (const auto& [id, count] : seq.output_counts()) {
      if (!std::binary_search(seq.prompt_token_set().begin(), seq.prompt_token_set().end(), id)) {
        penalize(id);
      }
    }
  }
  if (p.frequency_penalty != 0 || p.presence_penalty != 0) {
    for (const auto& [id, count] : seq.output_counts()) {
      logits[id] -= p.frequency_penalty * static_cast<float>(count);
      logits[id] -= p.presence_penalty;
    }
  }
}

TokenLogprob Sampler::Logprob(std::span<const float> logits, int32_t token, int top_n) {
  double max_logit = logits[0];
  for (float l : logits) max_logit = std::max<double>(max_logit, l);
  double total = 0;
  for (float l : logits) total += std::exp(static_cast<double>(l) - max_logit);
  const double log_z = max_logit + std::log(total);
  TokenLogprob out;
  out.token_id = token;
  out.logprob = static_cast<float>(logits[token] - log_z);
  if (top_n > 0) {
    const int n = std::min<int>(top_n, static_cast<int>(logits.size()));
    std::vector<int32_t> ids(logits.size());
    std::iota(ids.begin(), ids.end(), 0);
    std::partial_sort(ids.begin(), ids.begin() + n, ids.end(), ByLogitDesc{logits});
    for (int i = 0; i < n; ++i) {
      out.top.push_back(TopLogprob{ids[i], static_cast<float>(logits[ids[i]] - log_z)});
    }
  }
  return out;
}

absl::StatusOr<std::vector<SampledChunk>> Sampler::FromArgmax(const ScheduledBatch& batch,
                                                              const ForwardOutput& out) {
  std::vector<SampledChunk> result(batch.seqs.size());
  for (size_t i = 0; i < batch.seqs.size(); ++i) {
    if (!batch.forward.chunks[i].argmax_only) {
      return absl::InternalError(absl::StrCat("runner returned argmax ids for chunk ", i,
                                              ", which needs its logits"));
    }
    const int row = out.row_offset[i];
    if (row < 0 || static_cast<size_t>(row) >= out.argmax.size()) {
      return absl::InternalError(absl::StrCat("runner returned no argmax for chunk ", i));
    }
    if (batch.seqs[i].sample) result[i].token = out.argmax[row];
  }
  return result;
}

std::vector<float> Sampler::ApplyMask(std::span<const float> logits,
                                      const grammar::TokenBitmask& mask) {
  std::vector<float> out(logits.size(), -std::numeric_limits<float>::infinity());
  bool any = false;
  const size_t n = std::min(logits.size(), mask.words.size() * 64);
  for (size_t t = 0; t < n; ++t) {
    if (mask.allowed(static_cast<int32_t>(t))) {
      out[t] = logits[t];
      any = true;
    }
  }
  if (!any) out.assign(logits.begin(), logits.end());
  return out;
}

absl::StatusOr<std::vector<SampledChunk>> Sampler::Sample(
    const ScheduledBatch& batch, const ForwardOutput& out,
    std::span<const std::shared_ptr<const grammar::TokenBitmask>> masks) const {
  const size_t n = batch.seqs.size();
  const int vocab = out.vocab_size;
  if (vocab <= 0) return absl::InternalError("runner returned vocab_size <= 0");
  if (out.row_offset.size() != n) {
    return absl::InternalError(absl::StrCat("runner returned ", out.row_offset.size(),
                                            " row offsets for ", n, " chunks"));
  }
  if (out.logits.empty() && !out.argmax.empty()) return FromArgmax(batch, out);
  const size_t num_rows = out.logits.size() / static_cast<size_t>(vocab);
  std::vector<SampledChunk> result(n);
  for (size_t i = 0; i < n; ++i) {
    const SequenceChunk& chunk = batch.forward.chunks[i];
    Sequence& seq = *batch.seqs[i].seq;
    const SamplingParams& params = seq.params();
    const size_t rows = chunk.all_logits ? chunk.tokens.size() : 1;
    const int first = out.row_offset[i];
    if (first < 0 || static_cast<size_t>(first) + rows > num_rows) {
      return absl::InternalError(absl::StrCat("runner returned no logits rows for chunk ", i,
                                              " (seq ", chunk.seq_id, ")"));
    }
    auto row = [&](size_t r) {
      return std::span<const float>(out.logits.data() + (first + r) * vocab, vocab);
    };
    if (chunk.all_logits) {
      for (size_t r = 0; r < rows; ++r) {
        const int pos = chunk.start_pos + static_cast<int>(r) + 1;  // the token row r predicts
        const int next = seq.num_prompt_logprobs() +
                         static_cast<int>(result[i].prompt_logprobs.size());
        if (pos != next || pos >= seq.num_prompt_tokens()) continue;
        result[i].prompt_logprobs.push_back(
            Logprob(row(r), seq.tokens()[pos], params.prompt_logprobs));
      }
    }
    if (!batch.seqs[i].sample) continue;
    const std::span<const float> last = row(rows - 1);
    std::span<const float> scores = last;
    std::vector<float> processed;
    if (NeedsProcessing(seq)) {
      processed.assign(last.begin(), last.end());
      ProcessLogits(processed, seq, eos_ids_);
      scores = processed;
    }
    const grammar::TokenBitmask* mask = i < masks.size() ? masks[i].get() : nullptr;
    std::vector<float> masked;
    if (mask != nullptr) {
      masked = ApplyMask(scores, *mask);
      scores = masked;
    }
    int32_t token = SampleRow(scores, params, seq.rng());
    // Rounding at the end of a filtered distribution can land on a zero-weight token.
    if (mask != nullptr && token < vocab && !mask->allowed(token)) token = Argmax(masked);
    result[i].token = token;
    if (params.logprobs >= 0) result[i].logprob = Logprob(last, token, params.logprobs);
  }
  return result;
}

}  // namespace mxserve
