// The engine's observability hooks against a fake runner: the loop ticks while idle (systemd's
// watchdog ping rides on it), progress timestamps show a stuck step, the observer sees every
// token and request, and drain support (StopAccepting, FailAll) ends requests clearly.
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "coordinator/engine/engine.h"
#include "gtest/gtest.h"

namespace mxserve::testing {
namespace {

// Logits favour token (last position + 1) % vocab; Run blocks while held.
class GateRunner : public ModelRunner {
 public:
  absl::StatusOr<ForwardOutput> Run(const ForwardBatch& batch) override {
    {
      std::unique_lock<std::mutex> l(mu_);
      ++entered_;
      cv_.notify_all();
      cv_.wait(l, [&] { return !held_; });
    }
    ForwardOutput out;
    out.vocab_size = 8;
    for (const SequenceChunk& c : batch.chunks) {
      out.row_offset.push_back(static_cast<int>(out.logits.size()) / 8);
      std::vector<float> row(8, 0.f);
      row[(c.start_pos + c.tokens.size()) % 8] = 5.f;
      out.logits.insert(out.logits.end(), row.begin(), row.end());
    }
    return out;
  }
  int vocab_size() const override { return 8; }
  int block_size() const override { return 4; }
  int num_blocks() const override { return 64; }
  int max_model_len() const override { return 128; }

  void Hold(bool h) {
    std::lock_guard<std::mutex> l(mu_);
    held_ = h;
    cv_.notify_all();
  }
  void WaitEntered(int n) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return entered_ >= n; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool held_ = false;
  int entered_ = 0;
};

class CountingObserver : public EngineObserver {
 public:
  void OnStep(const StepRecord& s) override {
    std::lock_guard<std::mutex> l(mu);
    ++steps;
    step_tokens += s.num_tokens;
  }
  void OnFirstToken(absl::Duration ttft, int prompt) override {
    std::lock_guard<std::mutex> l(mu);
    ++first;
    prompt_tokens += prompt;
    EXPECT_GE(ttft, absl::ZeroDuration());
  }
  void OnNextTokens(int n, absl::Duration) override {
    std::lock_guard<std::mutex> l(mu);
    next += n;
  }
  void OnRejected(const char* reason) override {
    std::lock_guard<std::mutex> l(mu);
    rejected.push_back(reason);
  }
  void OnRequestFinished(const FinishedRequest& f) override {
    std::lock_guard<std::mutex> l(mu);
    ++finished;
    generated += f.generation_tokens;
    reasons.push_back(f.reason);
  }
  std::mutex mu;
  int steps = 0, step_tokens = 0, first = 0, next = 0, finished = 0, prompt_tokens = 0, generated = 0;
  std::vector<FinishReason> reasons;
  std::vector<std::string> rejected;
};

GenerateRequest Req(const std::string& id, int prompt_len, int max_tokens) {
  GenerateRequest r;
  r.request_id = id;
  for (int i = 0; i < prompt_len; ++i) r.prompt_tokens.push_back(i % 8);
  r.params.temperature = 0;
  r.params.max_tokens = max_tokens;
  r.params.ignore_eos = true;
  return r;
}

struct Collector {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<GenerationEvent> events;
  bool done = false;
  EventCallback Callback() {
    return [this](GenerationEvent ev) {
      std::lock_guard<std::mutex> l(mu);
      done = done || ev.finished;
      events.push_back(std::move(ev));
      cv.notify_all();
    };
  }
  bool WaitDone(std::chrono::seconds t = std::chrono::seconds(10)) {
    std::unique_lock<std::mutex> l(mu);
    return cv.wait_for(l, t, [&] { return done; });
  }
};

TEST(EngineHooks, LoopTicksWhileIdle) {
  GateRunner runner;
  std::atomic<int> ticks{0};
  EngineOptions o;
  o.on_loop_tick = [&] { ticks.fetch_add(1); };
  o.tick_interval = absl::Milliseconds(20);
  auto engine = Engine::Create(o, &runner, nullptr, {});
  ASSERT_TRUE(engine.ok());
  absl::SleepFor(absl::Milliseconds(500));
  // ~25 expected with no work at all; bounded generously for a loaded machine.
  EXPECT_GE(ticks.load(), 3);
  EXPECT_LE(ticks.load(), 60);
  EngineStats s = (*engine)->stats();
  EXPECT_LT(absl::Now() - s.loop_heartbeat, absl::Seconds(1));
}

TEST(EngineHooks, ObserverSeesEveryTokenAndRequest) {
  GateRunner runner;
  CountingObserver obs;
  EngineOptions o;
  o.observer = &obs;
  auto engine = Engine::Create(o, &runner, nullptr, {});
  ASSERT_TRUE(engine.ok());
  Collector a, b;
  ASSERT_TRUE((*engine)->Submit(Req("a", 5, 7), a.Callback()).ok());
  ASSERT_TRUE((*engine)->Submit(Req("b", 3, 4), b.Callback()).ok());
  ASSERT_TRUE(a.WaitDone());
  ASSERT_TRUE(b.WaitDone());
  (*engine)->Shutdown();
  std::lock_guard<std::mutex> l(obs.mu);
  EXPECT_EQ(obs.first, 2);
  EXPECT_EQ(obs.prompt_tokens, 8);
  EXPECT_EQ(obs.first + obs.next, 11);
  EXPECT_EQ(obs.finished, 2);
  EXPECT_EQ(obs.generated, 11);
  EXPECT_EQ(obs.reasons, (std::vector<FinishReason>{FinishReason::kLength, FinishReason::kLength}));
  EXPECT_GE(obs.steps, 7);
  EXPECT_EQ(obs.step_tokens, 8 + 11 - 2);  // prompts once, then one decode token per output but the last
}

TEST(EngineHooks, ProgressShowsAStuckStepAndDrainEndsIt) {
  GateRunner runner;
  CountingObserver obs;
  EngineOptions o;
  o.observer = &obs;
  auto engine = Engine::Create(o, &runner, nullptr, {});
  ASSERT_TRUE(engine.ok());
  runner.Hold(true);
  const absl::Time before = absl::Now();
  Collector a;
  ASSERT_TRUE((*engine)->Submit(Req("a", 4, 50), a.Callback()).ok());
  runner.WaitEntered(1);
  EngineStats s = (*engine)->stats();
  EXPECT_TRUE(s.in_step);
  EXPECT_GE(s.step_started, before);
  EXPECT_GE(s.last_progress, before);  // work arriving at an idle engine restarts the clock
  EXPECT_TRUE((*engine)->HasPendingRequests());

  // Drain: new requests are refused with the reason; the one in flight is failed clearly.
  (*engine)->StopAccepting("draining for a test");
  Collector late;
  absl::Status refused = (*engine)->Submit(Req("late", 2, 2), late.Callback());
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(refused.message(), "draining for a test");
  {
    std::lock_guard<std::mutex> l(obs.mu);
    EXPECT_EQ(obs.rejected, std::vector<std::string>{"draining"});
  }
  EXPECT_FALSE((*engine)->stats().accepting);
  (*engine)->FailAll(absl::UnavailableError("grace expired"));
  runner.Hold(false);
  ASSERT_TRUE(a.WaitDone());
  {
    std::lock_guard<std::mutex> l(a.mu);
    const GenerationEvent& last = a.events.back();
    EXPECT_EQ(last.finish_reason, FinishReason::kError);
    EXPECT_EQ(last.error.message(), "grace expired");
  }
  EXPECT_FALSE((*engine)->HasPendingRequests());
  s = (*engine)->stats();
  EXPECT_FALSE(s.in_step);
  EXPECT_GE(s.last_progress, s.step_started);
  std::lock_guard<std::mutex> l(obs.mu);
  EXPECT_EQ(obs.reasons, std::vector<FinishReason>{FinishReason::kError});
}

}  // namespace
}  // namespace mxserve::testing
