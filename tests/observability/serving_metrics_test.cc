// ServingMetrics: the /metrics page parses back as Prometheus text 0.0.4, carries vLLM's names
// with the mxserve: prefix, and its counters and histograms move exactly as observed.
#include "coordinator/observability/serving_metrics.h"

#include <random>

#include "gtest/gtest.h"
#include "tests/observability/prom_text.h"

namespace mxserve::testing {
namespace {

TEST(ServingMetrics, EmptyPageParsesWithVllmNames) {
  ServingMetrics m("tiny");
  PromPage page = ParsePrometheusText(m.Exposition());
  ASSERT_EQ(page.error, "");
  for (const char* name :
       {"mxserve:time_to_first_token_seconds", "mxserve:inter_token_latency_seconds",
        "mxserve:e2e_request_latency_seconds", "mxserve:iteration_tokens_total",
        "mxserve:step_duration_seconds", "mxserve:request_prompt_tokens",
        "mxserve:request_generation_tokens"}) {
    ASSERT_TRUE(page.families.count(name)) << name;
    EXPECT_EQ(page.families[name].type, "histogram") << name;
    EXPECT_EQ(page.Get(std::string(name) + "_count", {{"model_name", "tiny"}}), 0.0) << name;
  }
  for (const char* name : {"mxserve:prompt_tokens_total", "mxserve:generation_tokens_total",
                           "mxserve:request_success_total"}) {
    ASSERT_TRUE(page.families.count(name)) << name;
    EXPECT_EQ(page.families[name].type, "counter") << name;
  }
  EXPECT_EQ(page.Get("mxserve:request_success_total", {{"finished_reason", "stop"}}), 0.0);
  EXPECT_EQ(page.Get("mxserve:request_success_total", {{"finished_reason", "length"}}), 0.0);
}

// Random observations against a slow twin that buckets them by hand.
TEST(ServingMetrics, HistogramsAndCountersMatchATwin) {
  ServingMetrics m("tiny");
  std::mt19937 rng(42);
  std::uniform_real_distribution<double> secs(0, 3);
  std::vector<double> ttfts;
  int prompt = 0, generated = 0, length = 0, stop = 0;
  for (int r = 0; r < 50; ++r) {
    const double t = secs(rng);
    const int p = 1 + static_cast<int>(rng() % 100);
    m.OnFirstToken(absl::Seconds(t), p);
    ttfts.push_back(t);
    prompt += p;
    generated += 1;
    const int more = static_cast<int>(rng() % 5);
    if (more) m.OnNextTokens(more, absl::Milliseconds(10 * more));
    generated += more;
    FinishedRequest f;
    f.reason = rng() % 2 ? FinishReason::kLength : FinishReason::kStop;
    (f.reason == FinishReason::kLength ? length : stop)++;
    f.prompt_tokens = p;
    f.generation_tokens = 1 + more;
    f.e2e = absl::Seconds(t + 0.5);
    m.OnRequestFinished(f);
  }
  StepRecord step;
  step.num_tokens = 37;
  step.duration = absl::Milliseconds(3);
  m.OnStep(step);
  m.CountRejected("draining");

  PromPage page = ParsePrometheusText(m.Exposition());
  ASSERT_EQ(page.error, "");
  EXPECT_EQ(page.Get("mxserve:prompt_tokens_total"), prompt);
  EXPECT_EQ(page.Get("mxserve:generation_tokens_total"), generated);
  EXPECT_EQ(page.Get("mxserve:request_success_total", {{"finished_reason", "length"}}), length);
  EXPECT_EQ(page.Get("mxserve:request_success_total", {{"finished_reason", "stop"}}), stop);
  EXPECT_EQ(page.Get("mxserve:requests_rejected_total", {{"reason", "draining"}}), 1);
  EXPECT_EQ(page.Get("mxserve:time_to_first_token_seconds_count"), 50);
  double sum = 0;
  for (double t : ttfts) sum += t;
  EXPECT_NEAR(*page.Get("mxserve:time_to_first_token_seconds_sum"), sum, 1e-6);
  for (double le : TtftBuckets()) {
    int want = 0;
    for (double t : ttfts) want += t <= le;
    std::ostringstream les;
    les << le;
    std::optional<double> got = std::nullopt;
    for (const PromSample& s : page.samples) {
      if (s.name != "mxserve:time_to_first_token_seconds_bucket") continue;
      bool ok = false;
      if (ParsePromValue(s.labels.at("le"), &ok) == le) got = s.value;
    }
    ASSERT_TRUE(got.has_value()) << le;
    EXPECT_EQ(*got, want) << "le=" << le;
  }
  EXPECT_EQ(page.Get("mxserve:iteration_tokens_total_count"), 1);
  EXPECT_EQ(page.Get("mxserve:iteration_tokens_total_sum"), 37);
  EXPECT_EQ(page.Get("mxserve:iteration_tokens_total_bucket", {{"le", "32"}}), 0);
  EXPECT_EQ(page.Get("mxserve:iteration_tokens_total_bucket", {{"le", "64"}}), 1);
}

TEST(ServingMetrics, SnapshotsFromEngineRouterAndSupervisor) {
  ServingMetrics m("tiny");
  MetricsSources src;
  src.engine = [] {
    EngineStats e;
    e.num_running = 3;
    e.num_waiting = 2;
    e.kv_blocks_used = 25;
    e.kv_blocks_total = 100;
    return e;
  };
  src.router = []() -> std::optional<RouterStats> {
    RouterStats r;
    for (int b = 0; b < 2; ++b) {
      BackendStats s;
      s.index = b;
      s.name = "worker" + std::to_string(b);
      s.address = "127.0.0.1:" + std::to_string(4000 + b);
      s.state = b == 0 ? BackendState::kUp : BackendState::kDown;
      s.calls = 10 + b;
      s.bytes_sent = 1000;
      s.stream_opens = 1 + b;
      s.unary_calls = 5;
      s.shared_memory = b == 1;
      s.latency.counts[0] = 2;
      s.latency.counts[3] = 1;
      s.latency.counts[kLatencyBucketsS.size()] = 1;  // +Inf slot
      s.latency.count = 4;
      s.latency.sum_s = 12.5;
      r.backends.push_back(s);
    }
    r.failovers = 7;
    r.retries = 9;
    r.experts_without_host = 4;
    return r;
  };
  src.supervisor = []() -> std::optional<SupervisorStats> {
    SupervisorStats s;
    SupervisedWorkerStats w;
    w.index = 1;
    w.state = "backoff";
    w.restarts = 3;
    s.workers.push_back(w);
    return s;
  };
  src.ready = [] { return false; };
  m.SetSources(src);
  PromPage page = ParsePrometheusText(m.Exposition());
  ASSERT_EQ(page.error, "");
  EXPECT_EQ(page.Get("mxserve:num_requests_running"), 3);
  EXPECT_EQ(page.Get("mxserve:num_requests_waiting"), 2);
  EXPECT_DOUBLE_EQ(*page.Get("mxserve:kv_cache_usage_perc"), 0.25);
  EXPECT_EQ(page.Get("mxserve:ready"), 0);
  EXPECT_EQ(page.Get("mxserve:worker_up", {{"worker", "worker0"}}), 1);
  EXPECT_EQ(page.Get("mxserve:worker_up", {{"worker", "worker1"}, {"address", "127.0.0.1:4001"}}), 0);
  EXPECT_EQ(page.Get("mxserve:expert_calls_total", {{"worker", "worker1"}}), 11);
  EXPECT_EQ(page.Get("mxserve:expert_call_sent_bytes_total", {{"worker", "worker0"}}), 1000);
  EXPECT_EQ(page.Get("mxserve:expert_stream_opens_total", {{"worker", "worker1"}}), 2);
  EXPECT_EQ(page.Get("mxserve:expert_unary_calls_total", {{"worker", "worker0"}}), 5);
  EXPECT_EQ(page.Get("mxserve:expert_shared_memory", {{"worker", "worker0"}}), 0);
  EXPECT_EQ(page.Get("mxserve:expert_shared_memory", {{"worker", "worker1"}}), 1);
  EXPECT_EQ(page.Get("mxserve:expert_call_failovers_total"), 7);
  EXPECT_EQ(page.Get("mxserve:expert_call_retries_total"), 9);
  EXPECT_EQ(page.Get("mxserve:experts_without_host"), 4);
  EXPECT_EQ(page.Get("mxserve:worker_restarts_total", {{"worker", "worker1"}}), 3);
  EXPECT_EQ(page.Get("mxserve:worker_process_state", {{"worker", "worker1"}, {"state", "backoff"}}), 1);
  // Cumulative buckets from the router's per-slot counts.
  EXPECT_EQ(page.Get("mxserve:expert_call_latency_seconds_bucket", {{"worker", "worker0"}, {"le", "0.0005"}}), 2);
  EXPECT_EQ(page.Get("mxserve:expert_call_latency_seconds_bucket", {{"worker", "worker0"}, {"le", "0.005"}}), 3);
  EXPECT_EQ(page.Get("mxserve:expert_call_latency_seconds_bucket", {{"worker", "worker0"}, {"le", "10"}}), 3);
  EXPECT_EQ(page.Get("mxserve:expert_call_latency_seconds_bucket", {{"worker", "worker0"}, {"le", "+Inf"}}), 4);
  EXPECT_EQ(page.Get("mxserve:expert_call_latency_seconds_count", {{"worker", "worker0"}}), 4);
}

TEST(PromText, RejectsMalformedPages) {
  EXPECT_NE(ParsePrometheusText("foo 1\n").error, "");  // undeclared
  EXPECT_NE(ParsePrometheusText("# TYPE foo gauge\nfoo{a=b} 1\n").error, "");
  EXPECT_NE(ParsePrometheusText("# TYPE foo gauge\nfoo x\n").error, "");
  EXPECT_NE(ParsePrometheusText("# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\n"
                                "h_count 1\n").error, "");
  EXPECT_EQ(ParsePrometheusText("# TYPE foo gauge\nfoo{a=\"b\"} 1\n").error, "");
}

}  // namespace
}  // namespace mxserve::testing
