// Automatic prefix caching through Scheduler and Engine against FakeRunner, whose logits come
// from the KV it reads back (a wrongly shared block changes the tokens; a write into a shared
// block is a violation) and the slow twin ReferenceGreedy.
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "coordinator/engine/engine.h"
#include "coordinator/engine/scheduler.h"
#include "gtest/gtest.h"
#include "tests/engine/fakes.h"

namespace mxserve {
namespace {

using testing::FakeRunner;
using testing::ReferenceGreedy;

constexpr int kVocab = 64;

class Outputs {
 public:
  EventCallback For(const std::string& id) {
    return [this, id](GenerationEvent ev) {
      absl::MutexLock l(&mu_);
      tokens_[id].insert(tokens_[id].end(), ev.token_ids.begin(), ev.token_ids.end());
      if (ev.finished) {
        reasons_[id] = ev.finish_reason;
        ++finished_;
      }
    };
  }
  bool WaitFinished(int n) {
    absl::MutexLock l(&mu_);
    auto done = [&] { return finished_ >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&done), absl::Seconds(60));
  }
  std::map<std::string, std::vector<int32_t>> tokens() {
    absl::MutexLock l(&mu_);
    return tokens_;
  }
  std::map<std::string, FinishReason> reasons() {
    absl::MutexLock l(&mu_);
    return reasons_;
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, std::vector<int32_t>> tokens_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, FinishReason> reasons_ ABSL_GUARDED_BY(mu_);
  int finished_ ABSL_GUARDED_BY(mu_) = 0;
};

EngineOptions Opts(int budget, int max_seqs, bool caching, bool loop = true) {
  EngineOptions o;
  o.scheduler.max_num_batched_tokens = budget;
  o.scheduler.max_num_seqs = max_seqs;
  o.scheduler.enable_prefix_caching = caching;
  o.start_loop = loop;
  return o;
}

// One of a few shared "system prompts" (some sharing a part), then a random tail.
std::vector<int32_t> SharedPrefixPrompt(std::mt19937& rng) {
  static const std::vector<std::vector<int32_t>> kPrefixes = [] {
    std::mt19937 r(99);
    std::vector<std::vector<int32_t>> p(4);
    for (auto& v : p) {
      v.resize(8 + r() % 30);
      for (int32_t& t : v) t = r() % kVocab;
    }
    p[3].assign(p[0].begin(), p[0].begin() + 5);  // a prefix of another prefix
    return p;
  }();
  std::vector<int32_t> prompt = kPrefixes[rng() % kPrefixes.size()];
  const int tail = rng() % 12;  // 0: the prefix alone (a fully cached prompt)
  for (int i = 0; i < tail; ++i) prompt.push_back(rng() % kVocab);
  return prompt;
}

struct Workload {
  std::vector<GenerateRequest> requests;
};

Workload MakeWorkload(uint32_t seed, int n) {
  std::mt19937 rng(seed);
  Workload w;
  for (int i = 0; i < n; ++i) {
    GenerateRequest r;
    r.request_id = "r" + std::to_string(i);
    r.prompt_tokens = SharedPrefixPrompt(rng);
    r.params.max_tokens = 1 + rng() % 24;
    if (i % 3 == 0) {  // seeded sampling: the same stream whatever the batch or the cache
      r.params.temperature = 0.8f;
      r.params.seed = 1000 + i;
    } else {
      r.params.temperature = 0;
    }
    w.requests.push_back(std::move(r));
  }
  return w;
}

// Runs `w` from several submitting threads through an engine with the loop running.
std::map<std::string, std::vector<int32_t>> RunConcurrently(const Workload& w, bool caching,
                                                            int num_blocks, EngineStats* stats,
                                                            int64_t* foreign_reads) {
  FakeRunner runner(kVocab, 4, num_blocks, 160);
  runner.AllowSharedBlocks(caching);
  runner.ExpectLimits(24, 6);
  Outputs out;
  {
    auto engine = Engine::Create(Opts(24, 6, caching), &runner, nullptr, {});
    EXPECT_TRUE(engine.ok()) << engine.status();
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        for (size_t i = t; i < w.requests.size(); i += 4) {
          EXPECT_TRUE((*engine)->Submit(w.requests[i], out.For(w.requests[i].request_id)).ok());
          if (i % 5 == 0) std::this_thread::yield();
        }
      });
    }
    for (std::thread& th : threads) th.join();
    EXPECT_TRUE(out.WaitFinished(static_cast<int>(w.requests.size())));
    // Every block back in the pool (cached ones count as free) once all finished.
    for (int i = 0; i < 1000 && (*engine)->stats().kv_blocks_used != 0; ++i) {
      absl::SleepFor(absl::Milliseconds(2));
    }
    *stats = (*engine)->stats();
  }
  const auto v = runner.violations();
  EXPECT_TRUE(v.empty()) << v[0];
  *foreign_reads = runner.foreign_reads();
  return out.tokens();
}

TEST(PrefixCacheTest, OutputsBitIdenticalWithAndWithoutCachingUnderConcurrentLoad) {
  const Workload w = MakeWorkload(5, 60);
  EngineStats on, off;
  int64_t reads_on = 0, reads_off = 0;
  // 30 blocks of 4: small enough that sequences are preempted and cached blocks evicted.
  const auto with = RunConcurrently(w, true, 30, &on, &reads_on);
  const auto without = RunConcurrently(w, false, 30, &off, &reads_off);
  ASSERT_EQ(with.size(), w.requests.size());
  for (const GenerateRequest& r : w.requests) {
    EXPECT_EQ(with.at(r.request_id), without.at(r.request_id)) << r.request_id;
    if (r.params.temperature == 0) {
      EXPECT_EQ(with.at(r.request_id),
                ReferenceGreedy(r.prompt_tokens, r.params.max_tokens, kVocab))
          << r.request_id;
    }
  }
  EXPECT_GT(on.prefix_cache_hits, 0);
  EXPECT_GT(on.prefix_cache_queries, on.prefix_cache_hits);
  EXPECT_GT(reads_on, 0);  // the runner really read shared blocks
  EXPECT_EQ(off.prefix_cache_hits, 0);
  EXPECT_EQ(off.prefix_cache_queries, 0);
  EXPECT_EQ(reads_off, 0);
  EXPECT_EQ(on.kv_blocks_used, 0);
  EXPECT_EQ(off.kv_blocks_used, 0);
}

// A cache hit starts the prefill at the first uncached position with the cached blocks in its
// table, and always computes at least the last prompt token.
TEST(PrefixCacheTest, HitStartsAfterCachedBlocksAndComputesTheLastToken) {
  SchedulerOptions so;
  so.max_model_len = 64;
  Scheduler s(so, 16, 4, {});
  std::vector<int32_t> prompt(18);
  for (int i = 0; i < 18; ++i) prompt[i] = i + 1;
  auto make = [&](int64_t id, std::vector<int32_t> p) {
    GenerateRequest r;
    r.request_id = "s" + std::to_string(id);
    r.prompt_tokens = std::move(p);
    r.params.max_tokens = 4;
    r.params.temperature = 0;
    return std::make_shared<Sequence>(id, std::move(r), [](GenerationEvent) {}, nullptr);
  };
  auto run = [&](const ScheduledBatch& b) {
    std::vector<SampledChunk> sampled(b.seqs.size());
    for (size_t i = 0; i < b.seqs.size(); ++i) sampled[i].token = b.seqs[i].sample ? 7 : -1;
    return s.Postprocess(b, sampled);
  };
  auto a = make(1, prompt);
  s.Add(a);
  ScheduledBatch b1 = s.Schedule();
  ASSERT_EQ(b1.forward.chunks.size(), 1u);
  EXPECT_EQ(b1.forward.chunks[0].start_pos, 0);
  run(b1);  // a's 4 full blocks (16 tokens) are cached now
  EXPECT_EQ(s.block_manager().num_cached_blocks(), 4);

  auto b = make(2, prompt);  // the same prompt: blocks 0..3 hit, tokens 16 and 17 computed
  s.Add(b);
  auto c = make(3, std::vector<int32_t>(prompt.begin(), prompt.begin() + 16));  // 16 tokens:
  s.Add(c);  // only 3 blocks may hit, so that token 15 is computed and gives logits
  ScheduledBatch b2 = s.Schedule();
  ASSERT_EQ(b2.forward.chunks.size(), 3u);  // a's decode, then b and c
  const SequenceChunk& cb = b2.forward.chunks[1];
  EXPECT_EQ(cb.start_pos, 16);
  EXPECT_EQ(cb.tokens, std::vector<int32_t>({17, 18}));
  ASSERT_GE(cb.block_table.size(), 5u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(cb.block_table[i], a->block_table()[i]);
  EXPECT_NE(cb.block_table[4], a->block_table()[4]);  // a's partial block is a's alone
  const SequenceChunk& cc = b2.forward.chunks[2];
  EXPECT_EQ(cc.start_pos, 12);
  EXPECT_EQ(cc.tokens, std::vector<int32_t>({13, 14, 15, 16}));
  EXPECT_NE(cc.block_table[3], a->block_table()[3]);  // recomputed into its own block
  EXPECT_EQ(s.prefix_cache_queries(), 18 + 18 + 16);
  EXPECT_EQ(s.prefix_cache_hits(), 16 + 12);
  run(b2);
  for (auto& o : s.AbortAll()) (void)o;
  EXPECT_EQ(s.block_manager().num_used_blocks(), 0);
}

TEST(PrefixCacheTest, PromptLogprobsRequestComputesEveryPosition) {
  FakeRunner runner(kVocab, 4, 32, 160);
  Outputs out;
  auto engine = Engine::Create(Opts(64, 4, true, /*loop=*/false), &runner, nullptr, {});
  ASSERT_TRUE(engine.ok());
  std::vector<int32_t> prompt = {5, 9, 2, 8, 33, 1, 4, 4, 12, 60};
  GenerateRequest r;
  r.request_id = "a";
  r.prompt_tokens = prompt;
  r.params.max_tokens = 2;
  r.params.temperature = 0;
  ASSERT_TRUE((*engine)->Submit(r, out.For("a")).ok());
  while ((*engine)->Step()) {
  }
  r.request_id = "b";
  r.params.prompt_logprobs = 1;
  ASSERT_TRUE((*engine)->Submit(r, out.For("b")).ok());
  while ((*engine)->Step()) {
  }
  EXPECT_EQ((*engine)->stats().prefix_cache_hits, 0);  // b skipped the cache
  r.request_id = "c";
  r.params.prompt_logprobs = -1;
  ASSERT_TRUE((*engine)->Submit(r, out.For("c")).ok());
  while ((*engine)->Step()) {
  }
  EXPECT_EQ((*engine)->stats().prefix_cache_hits, 8);
  ASSERT_TRUE(out.WaitFinished(3));
  EXPECT_EQ(out.tokens()["a"], out.tokens()["c"]);
  EXPECT_EQ(out.tokens()["b"], out.tokens()["c"]);
  EXPECT_EQ(runner.steps().back().num_tokens, 1);  // c's last step: its one decode token
}

// Random prompts sharing prefixes, cancels and injected runner failures, stepped by hand: the
// pool ends with every block free, no invariant broken, and every greedy request that finished
// normally matches the slow twin.
TEST(PrefixCacheTest, SoakEndsWithEveryBlockFree) {
  std::mt19937 rng(77);
  FakeRunner runner(kVocab, 4, 24, 160);
  runner.ExpectLimits(20, 5);
  Outputs out;
  auto engine = Engine::Create(Opts(20, 5, true, /*loop=*/false), &runner, nullptr, {});
  ASSERT_TRUE(engine.ok());
  std::map<std::string, GenerateRequest> sent;
  int submitted = 0;
  for (int round = 0; round < 400; ++round) {
    const int arrivals = rng() % 3;
    for (int k = 0; k < arrivals; ++k) {
      GenerateRequest r;
      r.request_id = "q" + std::to_string(submitted++);
      r.prompt_tokens = SharedPrefixPrompt(rng);
      r.params.max_tokens = 1 + rng() % 16;
      r.params.temperature = 0;
      sent[r.request_id] = r;
      ASSERT_TRUE((*engine)->Submit(r, out.For(r.request_id)).ok());
    }
    if (rng() % 10 == 0 && submitted > 0) (*engine)->Cancel("q" + std::to_string(rng() % submitted));
    if (rng() % 40 == 0) runner.FailNextRuns(1);
    (*engine)->Step();
  }
  for (int i = 0; i < 20000 && (*engine)->Step(); ++i) {
  }
  ASSERT_TRUE(out.WaitFinished(submitted));
  const EngineStats st = (*engine)->stats();
  EXPECT_EQ(st.kv_blocks_used, 0);
  EXPECT_EQ(st.num_running, 0);
  EXPECT_EQ(st.num_waiting, 0);
  EXPECT_GT(st.prefix_cache_hits, 0);
  EXPECT_GT(st.num_preemptions, 0);
  EXPECT_GT(st.num_failed_steps, 0);
  const auto v = runner.violations();
  EXPECT_TRUE(v.empty()) << v[0];
  const auto tokens = out.tokens();
  const auto reasons = out.reasons();
  int checked = 0;
  for (const auto& [id, r] : sent) {
    if (reasons.at(id) != FinishReason::kLength) continue;
    EXPECT_EQ(tokens.at(id), ReferenceGreedy(r.prompt_tokens, r.params.max_tokens, kVocab)) << id;
    ++checked;
  }
  EXPECT_GT(checked, submitted / 2);
}

}  // namespace
}  // namespace mxserve
