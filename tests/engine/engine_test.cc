// Engine + Scheduler behaviour against FakeRunner (logits from the KV it reads back) and the
// slow twin ReferenceGreedy.
#include "coordinator/engine/engine.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/engine/fakes.h"

namespace mxserve {
namespace {

using testing::FakeRunner;
using testing::FakeTokenizer;
using testing::LogitsAfter;
using testing::ReferenceGreedy;

constexpr int kVocab = 64;

// Collects every request's events; waits are bounded so a broken engine fails, never hangs.
class Collector {
 public:
  EventCallback For(const std::string& id) {
    return [this, id](GenerationEvent ev) {
      absl::MutexLock l(&mu_);
      if (finished_.count(id)) ++events_after_finish_;
      if (ev.finished) finished_.insert(id);
      events_[id].push_back(std::move(ev));
    };
  }
  bool WaitFinished(size_t n, absl::Duration timeout = absl::Seconds(20)) {
    absl::MutexLock l(&mu_);
    auto done = [&] { return finished_.size() >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&done), timeout);
  }
  std::vector<GenerationEvent> Events(const std::string& id) {
    absl::MutexLock l(&mu_);
    return events_[id];
  }
  std::vector<int32_t> Tokens(const std::string& id) {
    std::vector<int32_t> t;
    for (const auto& ev : Events(id)) t.insert(t.end(), ev.token_ids.begin(), ev.token_ids.end());
    return t;
  }
  std::string Text(const std::string& id) {
    std::string s;
    for (const auto& ev : Events(id)) s += ev.text;
    return s;
  }
  GenerationEvent Final(const std::string& id) {
    auto evs = Events(id);
    return evs.empty() ? GenerationEvent{} : evs.back();
  }
  bool Finished(const std::string& id) {
    absl::MutexLock l(&mu_);
    return finished_.count(id) > 0;
  }
  int events_after_finish() {
    absl::MutexLock l(&mu_);
    return events_after_finish_;
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, std::vector<GenerationEvent>> events_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> finished_ ABSL_GUARDED_BY(mu_);
  int events_after_finish_ ABSL_GUARDED_BY(mu_) = 0;
};

std::vector<int32_t> RandomPrompt(std::mt19937& rng, int len) {
  std::vector<int32_t> p(len);
  for (int32_t& t : p) t = static_cast<int32_t>(rng() % kVocab);
  return p;
}

GenerateRequest Req(const std::string& id, std::vector<int32_t> prompt, int max_tokens,
                    float temperature = 0.0f) {
  GenerateRequest r;
  r.request_id = id;
  r.prompt_tokens = std::move(prompt);
  r.params.max_tokens = max_tokens;
  r.params.temperature = temperature;
  return r;
}

EngineOptions Opts(int budget, int max_seqs, bool loop = true, int max_waiting = 1024) {
  EngineOptions o;
  o.scheduler.max_num_batched_tokens = budget;
  o.scheduler.max_num_seqs = max_seqs;
  o.scheduler.max_waiting = max_waiting;
  o.start_loop = loop;
  return o;
}

std::unique_ptr<Engine> MakeEngine(EngineOptions o, FakeRunner* runner,
                                   const Tokenizer* tok = nullptr,
                                   std::vector<int32_t> eos = {}) {
  runner->ExpectLimits(o.scheduler.max_num_batched_tokens, o.scheduler.max_num_seqs);
  auto e = Engine::Create(std::move(o), runner, tok, std::move(eos));
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? std::move(*e) : nullptr;
}

// Manual stepping with a bound, for start_loop = false engines.
void StepUntilIdle(Engine& e, int max_steps = 10000) {
  for (int i = 0; i < max_steps && e.Step(); ++i) {
  }
}

TEST(EngineTest, GreedyOutputIsExact) {
  FakeRunner runner(kVocab, 4, 64, 256);
  Collector c;  // outlives the engine, whose shutdown may still call back
  auto engine = MakeEngine(Opts(64, 8), &runner);
  std::vector<int32_t> prompt = {3, 14, 15, 9, 26};
  ASSERT_TRUE(engine->Submit(Req("a", prompt, 12), c.For("a")).ok());
  ASSERT_TRUE(c.WaitFinished(1));
  EXPECT_EQ(c.Tokens("a"), ReferenceGreedy(prompt, 12, kVocab));
  const GenerationEvent fin = c.Final("a");
  EXPECT_EQ(fin.finish_reason, FinishReason::kLength);
  EXPECT_EQ(fin.prompt_tokens, 5);
  EXPECT_EQ(fin.completion_tokens, 12);
  EXPECT_TRUE(runner.violations().empty()) << runner.violations()[0];
}

// A runner that answers greedy steps with argmax ids (the GPU runner's way) gives the same
// tokens; a request that samples or wants logprobs in the same step gets its logits rows.
TEST(EngineTest, GreedyThroughArgmaxIdsIsExact) {
  FakeRunner runner(kVocab, 4, 64, 256);
  runner.AnswerArgmax(true);
  Collector c;
  auto engine = MakeEngine(Opts(64, 8), &runner);
  const std::vector<int32_t> p1 = {3, 14, 15, 9, 26}, p2 = {2, 7, 1, 8};
  ASSERT_TRUE(engine->Submit(Req("a", p1, 12), c.For("a")).ok());
  ASSERT_TRUE(c.WaitFinished(1));
  EXPECT_EQ(c.Tokens("a"), ReferenceGreedy(p1, 12, kVocab));
  const int greedy_steps = runner.argmax_steps();
  EXPECT_GE(greedy_steps, 11);  // every step that samples a token (the prefill's too)
  GenerateRequest b = Req("b", p2, 6);
  b.params.logprobs = 2;
  ASSERT_TRUE(engine->Submit(b, c.For("b")).ok());
  ASSERT_TRUE(c.WaitFinished(2));
  EXPECT_EQ(c.Tokens("b"), ReferenceGreedy(p2, 6, kVocab));
  EXPECT_EQ(runner.argmax_steps(), greedy_steps);  // logprobs: rows, never ids
  EXPECT_TRUE(runner.violations().empty()) << runner.violations()[0];
}

// A greedy request whose penalty (or bias, bad words, min_tokens) can change the argmax must get
// logits rows from the runner, never argmax ids; its tokens follow the penalized logits.
TEST(EngineTest, GreedyWithPenaltyGetsLogitsNotArgmaxIds) {
  FakeRunner runner(kVocab, 4, 64, 256);
  runner.AnswerArgmax(true);
  Collector c;
  auto engine = MakeEngine(Opts(64, 8), &runner);
  const std::vector<int32_t> prompt = {3, 14, 15, 9, 26};
  GenerateRequest r = Req("a", prompt, 12);
  r.params.frequency_penalty = 2.0f;
  r.params.repetition_penalty = 1.5f;
  ASSERT_TRUE(engine->Submit(r, c.For("a")).ok());
  ASSERT_TRUE(c.WaitFinished(1));
  EXPECT_EQ(runner.argmax_steps(), 0);
  // The slow twin: greedy over the penalized logits (vLLM's formulas, written out).
  std::vector<int32_t> tokens = prompt, want;
  for (int i = 0; i < 12; ++i) {
    std::vector<float> l = LogitsAfter(tokens, kVocab);
    std::map<int32_t, int> counts;
    for (int32_t t : want) ++counts[t];
    for (int v = 0; v < kVocab; ++v) {
      const bool seen = counts.count(v) || std::count(prompt.begin(), prompt.end(), v) > 0;
      if (seen) l[v] *= l[v] > 0 ? 1.0f / 1.5f : 1.5f;
      l[v] -= 2.0f * static_cast<float>(counts.count(v) ? counts[v] : 0);
    }
    const int32_t t = testing::ArgmaxLowest(l);
    want.push_back(t);
    tokens.push_back(t);
  }
  EXPECT_EQ(c.Tokens("a"), want);
  EXPECT_NE(want, ReferenceGreedy(prompt, 12, kVocab));  // the penalty changed something
  // min_tokens: logits only while it holds, argmax ids afterwards.
  GenerateRequest m = Req("m", {1, 2, 3}, 8);
  m.params.min_tokens = 3;
  m.params.stop_token_ids = {5};
  ASSERT_TRUE(engine->Submit(m, c.For("m")).ok());
  ASSERT_TRUE(c.WaitFinished(2));
  EXPECT_GE(runner.argmax_steps(), 1);
  EXPECT_TRUE(runner.violations().empty()) << runner.violations()[0];
}

// Many requests of random shapes, a small budget and a pool that forces preemption: every
// step stays within budget and seat limits, block tables cover their chunks, blocks are shared
// only read-only (the fake runner checks each KV read), every output equals the slow twin,
// and every block is back in the pool at the end.
TEST(EngineTest, RandomWorkloadKeepsInvariantsAndMatchesReference) {
  FakeRunner runner(kVocab, 4, 40, 160);
  Collector c;  // outlives the engine, whose shutdown may still call back
  auto engine = MakeEngine(Opts(16, 5), &runner);
  std::mt19937 rng(2024);
  std::map<std::string, std::vector<int32_t>> want;
  for (int i = 0; i < 30; ++i) {
    const std::string id = "r" + std::to_string(i);
    auto prompt = RandomPrompt(rng, 1 + rng() % 50);
    const int max_tokens = 1 + rng() % 20;
    want[id] = ReferenceGreedy(prompt, max_tokens, kVocab);
    ASSERT_TRUE(engine->Submit(Req(id, prompt, max_tokens), c.For(id)).ok());
    if (i % 7 == 0) absl::SleepFor(absl::Milliseconds(2));  // some join mid-run
  }
  ASSERT_TRUE(c.WaitFinished(30));
  for (const auto& [id, tokens] : want) EXPECT_EQ(c.Tokens(id), tokens) << id;
  const auto v = runner.violations();
  EXPECT_TRUE(v.empty()) << v[0];
  EXPECT_EQ(c.events_after_finish(), 0);
  const EngineStats s = engine->stats();
  EXPECT_EQ(s.kv_blocks_used, 0);
  EXPECT_EQ(s.num_running, 0);
  EXPECT_EQ(s.num_waiting, 0);
  EXPECT_GT(s.num_steps, 0);
  for (const auto& step : runner.steps()) {
    EXPECT_LE(step.num_tokens, 16);
    EXPECT_LE(step.num_chunks, 5);
  }
}

TEST(EngineTest, RequestsJoinMidRunAndStepsMixPrefillAndDecode) {
  FakeRunner runner(kVocab, 4, 64, 256);
  Collector c;  // outlives the engine, whose shutdown may still call back
  auto engine = MakeEngine(Opts(64, 8, /*loop=*/false), &runner);
  std::vector<int32_t> pa = {1, 2, 3}, pb = {4, 5, 6, 7, 8, 9};
  ASSERT_TRUE(engine->Submit(Req("a", pa, 10), c.For("a")).ok());
  ASSERT_TRUE(engine->Step());  // a's prefill
  ASSERT_TRUE(engine->Step());  // a decodes
  ASSERT_TRUE(engine->Submit(Req("b", pb, 5), c.For("b")).ok());
  ASSERT_TRUE(engine->Step());  // a decodes while b prefills
  const auto steps = runner.steps();
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_EQ(steps[2].num_chunks, 2);
  EXPECT_EQ(steps[2].num_decode, 1);
  EXPECT_EQ(steps[2].num_prefill, 1);
  EXPECT_EQ(steps[2].num_tokens, 1 + 6);
  StepUntilIdle(*engine);
  EXPECT_EQ(c.Tokens("a"), ReferenceGreedy(pa, 10, kVocab));
  EXPECT_EQ(c.Tokens("b"), ReferenceGreedy(pb, 5, kVocab));
  EXPECT_TRUE(runner.violations().empty());
}

TEST(EngineTest, ChunkedPrefillMatchesUnchunked) {
  std::mt19937 rng(77);
  const auto prompt = RandomPrompt(rng, 61);
  std::vector<int32_t> outputs[2];
  const int budgets[2] = {7, 4096};
  for (int k = 0; k < 2; ++k) {
    FakeRunner runner(kVocab, 4, 64, 256);
    Collector c;  // outlives the engine, whose shutdown may still call back
    auto engine = MakeEngine(Opts(budgets[k], 4, /*loop=*/false), &runner);
    ASSERT_TRUE(engine->Submit(Req("a", prompt, 9), c.For("a")).ok());
    StepUntilIdle(*engine);
    ASSERT_TRUE(c.Finished("a"));
    outputs[k] = c.Tokens("a");
    const auto steps = runner.steps();
    // ceil(61 / 7) = 9 prefill steps then 8 decode steps; unchunked: 1 + 8.
    EXPECT_EQ(steps.size(), k == 0 ? 9u + 8u : 1u + 8u);
    EXPECT_TRUE(runner.violations().empty());
  }
  EXPECT_EQ(outputs[0], outputs[1]);
  EXPECT_EQ(outputs[0], ReferenceGreedy(prompt, 9, kVocab));
}

TEST(EngineTest, PreemptionUnderTinyPoolFinishesEveryRequestWithSameOutput) {
  // 12 blocks x 4 = 48 KV slots; six requests of up to 30 tokens each cannot all fit.
  // Manual stepping: all six are submitted before the first step, so they contend for blocks
  // whatever the machine's load (with the loop thread, a fast engine could serve them one by
  // one and never preempt).
  FakeRunner runner(kVocab, 4, 12, 48);
  Collector c;  // outlives the engine, whose shutdown may still call back
  auto engine = MakeEngine(Opts(32, 6, /*loop=*/false), &runner);
  std::mt19937 rng(5);
  std::map<std::string, std::vector<int32_t>> want, prompts;
  for (int i = 0; i < 6; ++i) {
    const std::string id = "p" + std::to_string(i);
    auto prompt = RandomPrompt(rng, 10);
    want[id] = ReferenceGreedy(prompt, 20, kVocab);
    GenerateRequest r = Req(id, prompt, 20);
    r.params.prompt_logprobs = 1;  // recorded once even if the prefill is recomputed
    r.params.logprobs = 0;
    ASSERT_TRUE(engine->Submit(r, c.For(id)).ok());
    prompts[id] = prompt;
  }
  StepUntilIdle(*engine);
  ASSERT_TRUE(c.WaitFinished(6));
  for (const auto& [id, prompt] : prompts) {
    const auto events = c.Events(id);
    ASSERT_FALSE(events.empty());
    const auto& plp = events[0].prompt_logprobs;
    ASSERT_EQ(plp.size(), prompt.size()) << id;
    for (size_t p = 1; p < prompt.size(); ++p) {
      EXPECT_EQ(plp[p].token_id, prompt[p]);
      ASSERT_EQ(plp[p].top.size(), 1u);
    }
    int n = 0;
    for (const auto& ev : events) n += static_cast<int>(ev.logprobs.size());
    EXPECT_EQ(n, 20) << id;
  }
  for (const auto& [id, tokens] : want) {
    EXPECT_EQ(c.Tokens(id), tokens) << id;
    EXPECT_EQ(c.Final(id).finish_reason, FinishReason::kLength);
  }
  const EngineStats s = engine->stats();
  EXPECT_GT(s.num_preemptions, 0);
  EXPECT_EQ(s.kv_blocks_used, 0);
  const auto v = runner.violations();
  EXPECT_TRUE(v.empty()) << v[0];
}

TEST(EngineTest, StopStringAcrossTokenBoundariesThroughEngine) {
  FakeRunner runner(kVocab, 4, 64, 256);
  FakeTokenizer tok(FakeTokenizer::TwoLetterPieces(kVocab));
  std::vector<int32_t> prompt = {10, 20, 30};
  const auto ref = ReferenceGreedy(prompt, 20, kVocab);
  std::string ref_text;
  for (int32_t t : ref) ref_text += tok.TokenString(t);
  // Starts in the middle of output token 3 and ends in the middle of token 5.
  const std::string stop = ref_text.substr(7, 3);
  const std::string want_text = ref_text.substr(0, ref_text.find(stop));
  Collector c;  // outlives the engine, whose shutdown may still call back
  auto engine = MakeEngine(Opts(64, 4), &runner, &tok);
  GenerateRequest r = Req("s", prompt, 20);
  r.params.stop = {stop};
  ASSERT_TRUE(engine->Submit(r, c.For("s")).ok());
  ASSERT_TRUE(c.WaitFinished(1));
  EXPECT_EQ(c.Text("s"), want_text);
  const GenerationEvent fin = c.Final("s");
  EXPECT_EQ(fin.finish_reason, FinishReason::kStop);
  EXPECT_EQ(fin.stop_reason, stop);
  // Generation stops at the token that completes the stop string.
  const size_t end_token = (ref_text.find(stop) + stop.size() + 1) / 2;
  EXPECT_EQ(c.Tokens("s"), std::vector<int32_t>(ref.begin(), ref.begin() + end_token));
  // Every streamed prefix is a prefix of the final text: nothing past the stop leaked.
  std::string so_far;
  for (const auto& ev : c.Events("s")) {
    so_far += ev.text;
    EXPECT_EQ(want_text.compare(0, so_far.size(), so_far), 0);
  }
}

TEST(EngineTest, MaxTokensEosAndIgnoreEos) {
  FakeRunner runner(kVocab, 4, 64, 256);
  std::vector<int32_t> prompt = {7, 7, 7};
  const auto ref = ReferenceGreedy(prompt, 20, kVocab);
  // The EOS id: an output token whose first occurrence is at index >= 2.
  size_t eos_at = 2;
  while (std::find(ref.begin(), ref.begin() + eos_at, ref[eos_at]) != ref.begin() + eos_at) ++eos_at;
  ASSERT_LT(eos_at, ref.size());
  const int32_t eos = ref[eos_at];
  Collector c;  // outlives the engine, whose shutdown may still call back
  auto engine = MakeEngine(Opts(64, 4), &runner, nullptr, {eos});
  ASSERT_TRUE(engine->Submit(Req("eos", prompt, 20), c.For("eos")).ok());
  GenerateRequest ig = Req("ignore", prompt, 20);
  ig.params.ignore_eos = true;
  ASSERT_TRUE(engine->Submit(ig, c.For("ignore")).ok());
  ASSERT_TRUE(engine->Submit(Req("len", prompt, 2), c.For("len")).ok());
  ASSERT_TRUE(c.WaitFinished(3));
  EXPECT_EQ(c.Tokens("eos"), std::vector<int32_t>(ref.begin(), ref.begin() + eos_at + 1));
  EXPECT_EQ(c.Final("eos").finish_reason, FinishReason::kStop);
  EXPECT_EQ(c.Final("eos").completion_tokens, static_cast<int>(eos_at) + 1);
  EXPECT_EQ(c.Tokens("ignore"), ref);
  EXPECT_EQ(c.Final("ignore").finish_reason, FinishReason::kLength);
  EXPECT_EQ(c.Tokens("len"), std::vector<int32_t>(ref.begin(), ref.begin() + 2));
  EXPECT_EQ(c.Final("len").finish_reason, FinishReason::kLength);
}

TEST(EngineTest, SeedIsReproducibleWhateverTheBatch) {
  std::vector<int32_t> prompt = {1, 2, 3, 4};
  auto run = [&](int extra, uint64_t seed, int budget) {
    FakeRunner runner(kVocab, 4, 128, 256);
    Collector c;  // outlives the engine, whose shutdown may still call back
    auto engine = MakeEngine(Opts(budget, std::min(budget, 8)), &runner);
    std::mt19937 rng(extra);
    for (int i = 0; i < extra; ++i) {
      GenerateRequest r = Req("x" + std::to_string(i), RandomPrompt(rng, 1 + rng() % 30), 15, 1.0f);
      EXPECT_TRUE(engine->Submit(r, c.For(r.request_id)).ok());
    }
    GenerateRequest r = Req("seeded", prompt, 15, 1.0f);
    r.params.seed = seed;
    r.params.top_k = 20;
    r.params.top_p = 0.9f;
    EXPECT_TRUE(engine->Submit(r, c.For("seeded")).ok());
    EXPECT_TRUE(c.WaitFinished(extra + 1));
    return c.Tokens("seeded");
  };
  const auto alone = run(0, 42, 64);
  EXPECT_EQ(alone.size(), 15u);
  EXPECT_EQ(run(5, 42, 64), alone);
  EXPECT_EQ(run(3, 42, 5), alone);  // chunked, different mix
  EXPECT_NE(run(0, 43, 64), alone);
}

TEST(EngineTest, TopK1AndTinyTopPEqualGreedy) {
  FakeRunner runner(kVocab, 4, 64, 256);
  Collector c;  // outlives the engine, whose shutdown may still call back
  auto engine = MakeEngine(Opts(64, 4), &runner);
  std::vector<int32_t> prompt = {9, 8, 7};
  GenerateRequest k1 = Req("k1", prompt, 12, 1.3f);
  k1.params.top_k = 1;
  GenerateRequest p = Req("p", prompt, 12, 1.3f);
  p.params.top_p = 1e-6f;
  ASSERT_TRUE(engine->Submit(k1, c.For("k1")).ok());
  ASSERT_TRUE(engine->Submit(p, c.For("p")).ok());
  ASSERT_TRUE(c.WaitFinished(2));
  const auto ref = ReferenceGreedy(prompt, 12, kVocab);
  EXPECT_EQ(c.Tokens("k1"), ref);
  EXPECT_EQ(c.Tokens("p"), ref);
}

double DirectLogSoftmax(const std::vector<float>& l, int32_t t) {
  double m = l[0];
  for (float x : l) m = std::max<double>(m, x);
  double z = 0;
  for (float x : l) z += std::exp(x - m);
  return l[t] - m - std::log(z);
}

TEST(EngineTest, LogprobsAndPromptLogprobsMatchDirectLogSoftmax) {
  FakeRunner runner(kVocab, 4, 64, 256);
  Collector c;  // outlives the engine, whose shutdown may still call back
  auto engine = MakeEngine(Opts(5, 4), &runner);  // budget 5: prompt logprobs across chunks
  std::vector<int32_t> prompt = {5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  GenerateRequest r = Req("lp", prompt, 6, 0.8f);
  r.params.seed = 1;
  r.params.logprobs = 3;
  r.params.prompt_logprobs = 2;
  ASSERT_TRUE(engine->Submit(r, c.For("lp")).ok());
  ASSERT_TRUE(c.WaitFinished(1));
  const auto events = c.Events("lp");
  ASSERT_FALSE(events.empty());
  const auto& plp = events[0].prompt_logprobs;
  ASSERT_EQ(plp.size(), prompt.size());
  EXPECT_TRUE(std::isnan(plp[0].logprob));
  for (size_t p = 1; p < prompt.size(); ++p) {
    const auto l = LogitsAfter(std::vector<int32_t>(prompt.begin(), prompt.begin() + p), kVocab);
    EXPECT_EQ(plp[p].token_id, prompt[p]);
    EXPECT_NEAR(plp[p].logprob, DirectLogSoftmax(l, prompt[p]), 1e-4) << p;
    ASSERT_EQ(plp[p].top.size(), 2u);
    EXPECT_NEAR(plp[p].top[0].logprob, DirectLogSoftmax(l, testing::ArgmaxLowest(l)), 1e-4);
  }
  for (size_t i = 1; i < events.size(); ++i) EXPECT_TRUE(events[i].prompt_logprobs.empty());
  std::vector<int32_t> context = prompt;
  for (const auto& ev : events) {
    ASSERT_EQ(ev.logprobs.size(), ev.token_ids.size());
    for (size_t k = 0; k < ev.token_ids.size(); ++k) {
      const auto l = LogitsAfter(context, kVocab);
      EXPECT_EQ(ev.logprobs[k].token_id, ev.token_ids[k]);
      EXPECT_NEAR(ev.logprobs[k].logprob, DirectLogSoftmax(l, ev.token_ids[k]), 1e-4);
      ASSERT_EQ(ev.logprobs[k].top.size(), 3u);
      EXPECT_EQ(ev.logprobs[k].top[0].token_id, testing::ArgmaxLowest(l));
      EXPECT_GE(ev.logprobs[k].top[0].logprob, ev.logprobs[k].top[1].logprob);
      context.push_back(ev.token_ids[k]);
    }
  }
}

TEST(EngineTest, CancelAbortsRunningAndWaitingRequests) {
  FakeRunner runner(kVocab, 4, 64, 256);
  Collector c;  // outlives the engine, whose shutdown may still call back
  auto engine = MakeEngine(Opts(64, 1, /*loop=*/false), &runner);  // one seat: b waits
  ASSERT_TRUE(engine->Submit(Req("a", {1, 2, 3}, 50), c.For("a")).ok());
  ASSERT_TRUE(engine->Submit(Req("b", {1, 2, 3}, 50), c.For("b")).ok());
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(engine->Step());
  EXPECT_GT(engine->stats().kv_blocks_used, 0);
  engine->Cancel("a");
  engine->Cancel("b");
  engine->Cancel("unknown");  // no-op
  engine->Step();
  ASSERT_TRUE(c.Finished("a"));
  ASSERT_TRUE(c.Finished("b"));
  EXPECT_EQ(c.Final("a").finish_reason, FinishReason::kAbort);
  EXPECT_EQ(c.Final("b").finish_reason, FinishReason::kAbort);
  EXPECT_EQ(c.Tokens("a").size(), 3u);
  EXPECT_TRUE(c.Tokens("b").empty());
  EXPECT_EQ(engine->stats().kv_blocks_used, 0);
  EXPECT_FALSE(engine->Step());
  EXPECT_EQ(c.events_after_finish(), 0);
}

TEST(EngineTest, SubmitValidationErrorsNameTheField) {
  FakeRunner runner(kVocab, 4, 64, 100);
  Collector c;  // outlives the engine, whose shutdown may still call back
  auto engine = MakeEngine(Opts(64, 4, /*loop=*/false), &runner);
  auto check = [&](GenerateRequest r, const std::string& field) {
    const absl::Status s = engine->Submit(std::move(r), [](GenerationEvent) {});
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << field << ": " << s;
    EXPECT_NE(s.message().find(field), std::string::npos) << s;
  };
  check(Req("e", {}, 4), "prompt_tokens");
  check(Req("v", {1, kVocab}, 4), "prompt_tokens[1]");
  check(Req("m", {1}, 0), "max_tokens");
  check(Req("ctx", std::vector<int32_t>(60, 1), 41), "max_tokens");
  GenerateRequest r = Req("t", {1}, 4);
  r.params.temperature = -0.5f;
  check(r, "temperature");
  r = Req("t", {1}, 4);
  r.params.temperature = NAN;
  check(r, "temperature");
  r = Req("p", {1}, 4);
  r.params.top_p = 0.0f;
  check(r, "top_p");
  r.params.top_p = 1.5f;
  check(r, "top_p");
  r = Req("k", {1}, 4);
  r.params.top_k = -2;
  check(r, "top_k");
  r = Req("l", {1}, 4);
  r.params.logprobs = 21;
  check(r, "logprobs");
  r = Req("pl", {1}, 4);
  r.params.prompt_logprobs = 21;
  check(r, "prompt_logprobs");
  r = Req("s", {1}, 4);
  r.params.stop = {""};
  check(r, "stop[0]");
  r = Req("st", {1}, 4);
  r.params.stop_token_ids = {3, -1};
  check(r, "stop_token_ids[1]");
  EXPECT_EQ(engine->Submit(Req("cb", {1}, 4), nullptr).code(), absl::StatusCode::kInvalidArgument);
  // Exactly at the limit is fine; a live duplicate id is not.
  EXPECT_TRUE(engine->Submit(Req("ok", std::vector<int32_t>(60, 1), 40), c.For("ok")).ok());
  check(Req("ok", {1}, 4), "request_id");
  EXPECT_EQ(engine->stats().num_waiting, 1);
}

TEST(EngineTest, CreateRejectsBadOptions) {
  FakeRunner runner(kVocab, 4, 8, 100);
  EngineOptions o = Opts(0, 4);
  EXPECT_NE(Engine::Create(Opts(3, 4), &runner, nullptr, {}).status().message().find("max_num_batched_tokens"),
            std::string::npos);
  EXPECT_NE(Engine::Create(o, &runner, nullptr, {}).status().message().find("max_num_batched_tokens"),
            std::string::npos);
  o = Opts(16, 4);
  o.scheduler.max_model_len = 101;
  EXPECT_NE(Engine::Create(o, &runner, nullptr, {}).status().message().find("max_model_len"),
            std::string::npos);
  EXPECT_NE(Engine::Create(Opts(16, 4), &runner, nullptr, {kVocab}).status().message().find("eos_ids[0]"),
            std::string::npos);
  // The model allows 100 tokens but the pool holds 32: one sequence must fit alone.
  auto e = Engine::Create(Opts(16, 4), &runner, nullptr, {});
  ASSERT_TRUE(e.ok());
  EXPECT_EQ((*e)->max_model_len(), 32);
}

TEST(EngineTest, QueueFullIsResourceExhausted) {
  FakeRunner runner(kVocab, 4, 64, 256);
  Collector c;  // outlives the engine, whose shutdown may still call back
  auto engine = MakeEngine(Opts(64, 1, /*loop=*/false, /*max_waiting=*/2), &runner);
  ASSERT_TRUE(engine->Submit(Req("a", {1}, 3), c.For("a")).ok());
  ASSERT_TRUE(engine->Submit(Req("b", {1}, 3), c.For("b")).ok());
  EXPECT_EQ(engine->Submit(Req("c", {1}, 3), c.For("c")).code(),
            absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(engine->Step());  // a runs; b waits (one seat)
  ASSERT_TRUE(engine->Submit(Req("c", {1}, 3), c.For("c")).ok());
  EXPECT_EQ(engine->Submit(Req("d", {1}, 3), c.For("d")).code(),
            absl::StatusCode::kResourceExhausted);
  StepUntilIdle(*engine);
  EXPECT_TRUE(c.Finished("a") && c.Finished("b") && c.Finished("c"));
}

TEST(EngineTest, RunnerFailureFailsThatStepsRequestsAndEngineKeepsGoing) {
  FakeRunner runner(kVocab, 4, 64, 256);
  Collector c;  // outlives the engine, whose shutdown may still call back
  auto engine = MakeEngine(Opts(64, 4), &runner);
  runner.FailNextRuns(1);
  ASSERT_TRUE(engine->Submit(Req("f1", {1, 2}, 5), c.For("f1")).ok());
  ASSERT_TRUE(c.WaitFinished(1));
  EXPECT_EQ(c.Final("f1").finish_reason, FinishReason::kError);
  EXPECT_EQ(c.Final("f1").error.code(), absl::StatusCode::kInternal);
  EXPECT_NE(c.Final("f1").error.message().find("injected"), std::string::npos);
  std::vector<int32_t> prompt = {3, 4, 5};
  ASSERT_TRUE(engine->Submit(Req("ok", prompt, 6), c.For("ok")).ok());
  ASSERT_TRUE(c.WaitFinished(2));
  EXPECT_EQ(c.Tokens("ok"), ReferenceGreedy(prompt, 6, kVocab));
  EXPECT_EQ(engine->stats().kv_blocks_used, 0);
  EXPECT_EQ(engine->stats().num_failed_steps, 1);
}

TEST(EngineTest, RunnerFailureMidDecodeFailsAllInThatStep) {
  FakeRunner runner(kVocab, 4, 64, 256);
  Collector c;  // outlives the engine, whose shutdown may still call back
  auto engine = MakeEngine(Opts(64, 4, /*loop=*/false), &runner);
  ASSERT_TRUE(engine->Submit(Req("a", {1, 2}, 10), c.For("a")).ok());
  ASSERT_TRUE(engine->Submit(Req("b", {3}, 10), c.For("b")).ok());
  ASSERT_TRUE(engine->Step());
  ASSERT_TRUE(engine->Step());
  runner.FailNextRuns(1);
  ASSERT_TRUE(engine->Step());
  EXPECT_EQ(c.Final("a").finish_reason, FinishReason::kError);
  EXPECT_EQ(c.Final("b").finish_reason, FinishReason::kError);
  EXPECT_EQ(c.Tokens("a").size(), 2u);
  EXPECT_EQ(engine->stats().kv_blocks_used, 0);
  ASSERT_TRUE(engine->Submit(Req("a", {1, 2}, 4), c.For("a2")).ok());  // id reusable
  StepUntilIdle(*engine);
  EXPECT_EQ(c.Tokens("a2"), ReferenceGreedy({1, 2}, 4, kVocab));
}

TEST(EngineTest, ShutdownAbortsPendingAndRejectsNewWork) {
  FakeRunner runner(kVocab, 4, 64, 256);
  Collector c;  // outlives the engine, whose shutdown may still call back
  auto engine = MakeEngine(Opts(64, 1, /*loop=*/false), &runner);
  ASSERT_TRUE(engine->Submit(Req("a", {1}, 30), c.For("a")).ok());
  ASSERT_TRUE(engine->Submit(Req("b", {1}, 30), c.For("b")).ok());
  ASSERT_TRUE(engine->Step());
  ASSERT_TRUE(engine->Submit(Req("c", {1}, 30), c.For("c")).ok());  // still in the inbox
  engine->Shutdown();
  for (const char* id : {"a", "b", "c"}) {
    ASSERT_TRUE(c.Finished(id)) << id;
    EXPECT_EQ(c.Final(id).finish_reason, FinishReason::kAbort);
  }
  EXPECT_EQ(engine->Submit(Req("d", {1}, 3), c.For("d")).code(), absl::StatusCode::kUnavailable);
  engine->Shutdown();  // idempotent
  EXPECT_EQ(engine->stats().kv_blocks_used, 0);
}

TEST(EngineTest, ConcurrentSubmittersAllFinishAndLoopGoesIdle) {
  FakeRunner runner(kVocab, 8, 256, 256);
  Collector c;  // outlives the engine, whose shutdown may still call back
  auto engine = MakeEngine(Opts(48, 16), &runner);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int i = 0; i < 8; ++i) {
        const std::string id = "t" + std::to_string(t) + "_" + std::to_string(i);
        EXPECT_TRUE(engine->Submit(Req(id, RandomPrompt(rng, 1 + rng() % 20), 1 + rng() % 10),
                                   c.For(id)).ok());
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_TRUE(c.WaitFinished(32));
  const int64_t steps = engine->stats().num_steps;
  absl::SleepFor(absl::Milliseconds(30));
  EXPECT_EQ(engine->stats().num_steps, steps);  // idle: no step without work
  EXPECT_TRUE(runner.violations().empty());
}

}  // namespace
}  // namespace mxserve
