// Test doubles for the engine: a ModelRunner whose logits are a deterministic function of the
// context it reads back from its own simulated paged KV cache (so a wrong block table, a wrongly
// shared block or a bad recompute changes the tokens; a block shared read-only between
// sequences is legal, a write into one is a violation), the slow obvious twin that generates the same
// tokens without any batching, and a table-driven Tokenizer.
#pragma once

#include <cmath>
#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/engine/model_runner.h"
#include "coordinator/tokenizer/tokenizer.h"

namespace mxserve::testing {

inline uint64_t Mix(uint64_t x) {  // splitmix64 finalizer
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
// The "hidden state" after reading `token` at `pos` with state `prev` (the KV a real model keeps).
inline uint64_t NextState(uint64_t prev, int32_t token, int pos) {
  return Mix(prev ^ Mix((static_cast<uint64_t>(token) << 20) + static_cast<uint64_t>(pos)));
}
constexpr uint64_t kInitialState = 0x12345678ull;
inline float Logit(uint64_t state, int v) {
  const uint64_t r = Mix(state + static_cast<uint64_t>(v) * 0x632BE59BD9B4E019ull);
  return static_cast<float>(static_cast<double>(r >> 40) / static_cast<double>(1ull << 24) * 8.0 - 4.0);
}
inline std::vector<float> LogitsFor(uint64_t state, int vocab) {
  std::vector<float> l(vocab);
  for (int v = 0; v < vocab; ++v) l[v] = Logit(state, v);
  return l;
}
// Slow twin: the logits after reading all of `tokens`.
inline std::vector<float> LogitsAfter(const std::vector<int32_t>& tokens, int vocab) {
  uint64_t s = kInitialState;
  for (size_t p = 0; p < tokens.size(); ++p) s = NextState(s, tokens[p], static_cast<int>(p));
  return LogitsFor(s, vocab);
}
inline int32_t ArgmaxLowest(const std::vector<float>& l) {
  int32_t best = 0;
  for (size_t i = 1; i < l.size(); ++i)
    if (l[i] > l[best]) best = static_cast<int32_t>(i);
  return best;
}
// Slow twin of greedy generation: `max_tokens` tokens, stopping after an id in `eos`.
inline std::vector<int32_t> ReferenceGreedy(std::vector<int32_t> tokens, int max_tokens, int vocab,
                                            const std::set<int32_t>& eos = {}) {
  std::vector<int32_t> out;
  for (int i = 0; i < max_tokens; ++i) {
    const int32_t t = ArgmaxLowest(LogitsAfter(tokens, vocab));
    out.push_back(t);
    tokens.push_back(t);
    if (eos.count(t)) break;
  }
  return out;
}

struct StepRecord {
  int num_tokens = 0;
  int num_chunks = 0;
  int num_prefill = 0;  // chunks with more than one token or not at the end
  int num_decode = 0;
  std::vector<int64_t> seq_ids;
};

class FakeRunner : public ModelRunner {
 public:
  FakeRunner(int vocab, int block_size, int num_blocks, int max_model_len)
      : vocab_(vocab), block_size_(block_size), num_blocks_(num_blocks),
        max_model_len_(max_model_len), kv_(static_cast<size_t>(num_blocks) * block_size) {}

  // Checked on every step (0 = unchecked).
  void ExpectLimits(int max_tokens_per_step, int max_seqs) {
    absl::MutexLock l(&mu_);
    max_tokens_ = max_tokens_per_step;
    max_seqs_ = max_seqs;
  }
  void FailNextRuns(int n) {
    absl::MutexLock l(&mu_);
    fail_next_ = n;
  }
  // Answer steps whose chunks are all argmax_only with argmax ids instead of logits rows (as
  // the GPU runner does); counts the steps so answered.
  void AnswerArgmax(bool on) {
    absl::MutexLock l(&mu_);
    answer_argmax_ = on;
  }
  int argmax_steps() const {
    absl::MutexLock l(&mu_);
    return argmax_steps_;
  }

  absl::StatusOr<ForwardOutput> Run(const ForwardBatch& batch) override {
    absl::MutexLock l(&mu_);
    if (fail_next_ > 0) {
      --fail_next_;
      return absl::InternalError("injected runner failure");
    }
    StepRecord rec;
    rec.num_chunks = static_cast<int>(batch.chunks.size());
    // Blocks that several chunks' tables name this step are shared (prefix caching): legal
    // only while none of those chunks writes into them.
    std::map<int32_t, int> tables_naming;
    std::set<int32_t> written;
    for (const SequenceChunk& c : batch.chunks) {
      const int end = c.start_pos + static_cast<int>(c.tokens.size());
      for (int32_t b : std::set<int32_t>(c.block_table.begin(), c.block_table.end())) ++tables_naming[b];
      for (int p = c.start_pos; p < end; ++p) {
        if (p / block_size_ < static_cast<int>(c.block_table.size())) written.insert(c.block_table[p / block_size_]);
      }
    }
    for (const auto& [b, n] : tables_naming) {
      if (n > 1 && written.count(b)) Violation(absl::StrCat("block ", b, " shared by ", n, " tables is written"));
    }
    ForwardOutput out;
    out.vocab_size = vocab_;
    for (const SequenceChunk& c : batch.chunks) {
      const int n = static_cast<int>(c.tokens.size());
      rec.num_tokens += n;
      rec.seq_ids.push_back(c.seq_id);
      if (n == 1 && c.start_pos > 0) ++rec.num_decode; else ++rec.num_prefill;
      const int end = c.start_pos + n;
      if (n == 0) Violation("empty chunk");
      if (end > max_model_len_) Violation(absl::StrCat("seq ", c.seq_id, " past max_model_len"));
      if (static_cast<int64_t>(c.block_table.size()) * block_size_ < end) {
        Violation(absl::StrCat("seq ", c.seq_id, " block table covers ",
                               c.block_table.size() * block_size_, " < ", end, " positions"));
        return absl::InternalError("bad block table");
      }
      for (int32_t b : c.block_table) {
        if (b < 0 || b >= num_blocks_) {
          Violation(absl::StrCat("block id ", b));
          return absl::InternalError("bad block id");
        }
      }
      if (std::set<int32_t>(c.block_table.begin(), c.block_table.end()).size() != c.block_table.size()) {
        Violation(absl::StrCat("seq ", c.seq_id, " names a block twice"));
      }
      auto slot = [&](int p) -> Kv& {
        return kv_[static_cast<size_t>(c.block_table[p / block_size_]) * block_size_ + p % block_size_];
      };
      for (int p = 0; p < c.start_pos; ++p) {
        const Kv& kv = slot(p);
        const int32_t b = c.block_table[p / block_size_];
        if (kv.pos != p || (kv.seq_id != c.seq_id && !allow_shared_)) {
          Violation(absl::StrCat("seq ", c.seq_id, " reads KV of seq ", kv.seq_id, " pos ", kv.pos,
                                 " at pos ", p));
        } else if (kv.seq_id != c.seq_id) {
          // Another sequence's KV (a shared prefix block): whole blocks only, and the block must
          // not change while this sequence uses it
          ++foreign_reads_;
          if (p % block_size_ == 0) {
            const Kv& last = kv_[static_cast<size_t>(b) * block_size_ + block_size_ - 1];
            if (last.seq_id != kv.seq_id || last.pos != p + block_size_ - 1) {
              Violation(absl::StrCat("seq ", c.seq_id, " shares block ", b, ", which is not full"));
            }
            // (By content: a preempted sequence may find the block again after it was evicted
            // and recomputed with the same tokens.)
            auto [it, fresh] = seen_state_[c.seq_id].emplace(b, last.state);
            if (!fresh && it->second != last.state) {
              Violation(absl::StrCat("block ", b, " was written while seq ", c.seq_id, " shares it"));
            }
          }
        }
      }
      uint64_t s = c.start_pos == 0 ? kInitialState : slot(c.start_pos - 1).state;
      out.row_offset.push_back(static_cast<int>(out.logits.size() / vocab_));
      for (int i = 0; i < n; ++i) {
        const int p = c.start_pos + i;
        s = NextState(s, c.tokens[i], p);
        slot(p) = Kv{c.seq_id, p, s};
        if (c.all_logits || i == n - 1) {
          const std::vector<float> l = LogitsFor(s, vocab_);
          out.logits.insert(out.logits.end(), l.begin(), l.end());
        }
      }
    }
    if (max_tokens_ > 0 && rec.num_tokens > max_tokens_)
      Violation(absl::StrCat("step ran ", rec.num_tokens, " tokens > budget ", max_tokens_));
    if (max_seqs_ > 0 && rec.num_chunks > max_seqs_)
      Violation(absl::StrCat("step ran ", rec.num_chunks, " seqs > ", max_seqs_));
    steps_.push_back(std::move(rec));
    bool all_argmax = answer_argmax_ && !batch.chunks.empty();
    for (const SequenceChunk& c : batch.chunks) all_argmax = all_argmax && c.argmax_only;
    if (all_argmax) {
      const size_t rows = out.logits.size() / vocab_;
      for (size_t r = 0; r < rows; ++r) {
        const float* l = &out.logits[r * vocab_];
        out.argmax.push_back(static_cast<int32_t>(std::max_element(l, l + vocab_) - l));
      }
      out.logits.clear();
      ++argmax_steps_;
    }
    return out;
  }

  int vocab_size() const override { return vocab_; }
  int block_size() const override { return block_size_; }
  int num_blocks() const override { return num_blocks_; }
  int max_model_len() const override { return max_model_len_; }

  // false: reading KV another sequence wrote is a violation (no prefix caching).
  void AllowSharedBlocks(bool on) {
    absl::MutexLock l(&mu_);
    allow_shared_ = on;
  }
  // Reads of KV that another sequence wrote (prefix cache hits).
  int64_t foreign_reads() const {
    absl::MutexLock l(&mu_);
    return foreign_reads_;
  }
  std::vector<std::string> violations() const {
    absl::MutexLock l(&mu_);
    return violations_;
  }
  std::vector<StepRecord> steps() const {
    absl::MutexLock l(&mu_);
    return steps_;
  }

 private:
  struct Kv {
    int64_t seq_id = -1;
    int pos = -1;
    uint64_t state = 0;
  };
  void Violation(std::string s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (violations_.size() < 20) violations_.push_back(std::move(s));
  }

  const int vocab_, block_size_, num_blocks_, max_model_len_;
  mutable absl::Mutex mu_;
  std::vector<Kv> kv_ ABSL_GUARDED_BY(mu_);
  int max_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  int max_seqs_ ABSL_GUARDED_BY(mu_) = 0;
  int fail_next_ ABSL_GUARDED_BY(mu_) = 0;
  bool answer_argmax_ ABSL_GUARDED_BY(mu_) = false;
  bool allow_shared_ ABSL_GUARDED_BY(mu_) = true;
  int64_t foreign_reads_ ABSL_GUARDED_BY(mu_) = 0;
  // seq -> block it shares -> the state in the block's last slot when first read.
  std::map<int64_t, std::map<int32_t, uint64_t>> seen_state_ ABSL_GUARDED_BY(mu_);
  int argmax_steps_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> violations_ ABSL_GUARDED_BY(mu_);
  std::vector<StepRecord> steps_ ABSL_GUARDED_BY(mu_);
};

// Token id -> bytes from a table; ids in `special` are dropped when skip_special.
class FakeTokenizer : public Tokenizer {
 public:
  explicit FakeTokenizer(std::vector<std::string> pieces, std::set<int32_t> special = {})
      : pieces_(std::move(pieces)), special_(std::move(special)) {}
  // Every id of a `vocab`-sized vocabulary spells two lowercase letters.
  static std::vector<std::string> TwoLetterPieces(int vocab) {
    std::vector<std::string> p;
    for (int v = 0; v < vocab; ++v) {
      p.push_back(std::string(1, static_cast<char>('a' + (v * 7) % 26)) +
                  static_cast<char>('a' + (v * 11 + 3) % 26));
    }
    return p;
  }

  std::vector<int32_t> Encode(std::string_view, bool) const override { return {}; }
  absl::StatusOr<std::string> DecodeBytes(std::span<const int32_t> ids,
                                          bool skip_special) const override {
    std::string s;
    for (int32_t id : ids) {
      if (id < 0 || id >= vocab_size()) return absl::InvalidArgumentError(absl::StrCat("id ", id));
      if (skip_special && special_.count(id)) continue;
      s += pieces_[id];
    }
    return s;
  }
  absl::StatusOr<std::string> Decode(std::span<const int32_t> ids, bool skip_special) const override {
    return DecodeBytes(ids, skip_special);
  }
  std::string TokenString(int32_t id) const override { return pieces_.at(id); }
  int vocab_size() const override { return static_cast<int>(pieces_.size()); }
  std::optional<int32_t> SpecialTokenId(std::string_view) const override { return std::nullopt; }
  bool IsSpecial(int32_t id) const override { return special_.count(id) > 0; }
  std::optional<int32_t> eos_token_id() const override { return std::nullopt; }
  std::optional<int32_t> bos_token_id() const override { return std::nullopt; }

 private:
  std::vector<std::string> pieces_;
  std::set<int32_t> special_;
};

}  // namespace mxserve::testing
