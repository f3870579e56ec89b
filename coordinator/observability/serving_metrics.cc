#include "coordinator/observability/serving_metrics.h"

#include <limits>
#include <sstream>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/histogram.h"
#include "prometheus/metric_family.h"
#include "prometheus/registry.h"
#include "prometheus/text_serializer.h"

namespace mxserve {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

MetricFamily Family(std::string name, std::string help, MetricType type) {
  MetricFamily f;
  f.name = std::move(name);
  f.help = std::move(help);
  f.type = type;
  return f;
}

ClientMetric Value(MetricType type, double v, std::vector<ClientMetric::Label> labels) {
  ClientMetric m;
  m.label = std::move(labels);
  if (type == MetricType::Counter) {
    m.counter.value = v;
  } else {
    m.gauge.value = v;
  }
  return m;
}

}  // namespace

const std::vector<double>& TtftBuckets() {
  static const std::vector<double> b = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,
                                        0.25,  0.5,   0.75, 1.0,  2.5,  5.0,  7.5,  10.0,
                                        20.0,  40.0,  80.0, 160.0, 640.0, 2560.0};
  return b;
}
const std::vector<double>& InterTokenBuckets() {
  static const std::vector<double> b = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075,
                                        0.1,   0.15,   0.2,   0.3,  0.4,   0.5,  0.75,
                                        1.0,   2.5,    5.0,   7.5,  10.0,  20.0, 40.0, 80.0};
  return b;
}
const std::vector<double>& E2eBuckets() {
  static const std::vector<double> b = {0.05, 0.1,  0.3,  0.5,  0.8,   1.0,   1.5,   2.0,
                                        2.5,  5.0,  10.0, 15.0, 20.0,  30.0,  40.0,  50.0,
                                        60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
  return b;
}
const std::vector<double>& StepBuckets() {
  static const std::vector<double> b = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                        0.1,    0.25,  0.5,    1.0,   2.5,  5.0,   10.0, 30.0};
  return b;
}
const std::vector<double>& IterationTokenBuckets() {
  static const std::vector<double> b = {1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};
  return b;
}
const std::vector<double>& RequestTokenBuckets() {
  static const std::vector<double> b = {1,    2,    5,     10,    20,    50,    100,   200,
                                        500,  1000, 2000,  5000,  10000, 20000, 50000, 100000,
                                        200000, 500000, 1000000};
  return b;
}

// Metrics whose truth lives elsewhere (engine, router, supervisor): read at scrape time.
class ServingMetrics::SnapshotCollector {
 public:
  explicit SnapshotCollector(std::string model_name) : model_(std::move(model_name)) {}
  void Set(MetricsSources s) {
    absl::MutexLock l(&mu_);
    sources_ = std::move(s);
  }

  std::vector<MetricFamily> Collect() const {
    MetricsSources src;
    {
      absl::MutexLock l(&mu_);
      src = sources_;
    }
    std::vector<MetricFamily> out;
    const std::vector<ClientMetric::Label> model = {{"model_name", model_}};
    auto gauge = [&](const char* name, const char* help, double v) {
      MetricFamily f = Family(name, help, MetricType::Gauge);
      f.metric.push_back(Value(MetricType::Gauge, v, model));
      out.push_back(std::move(f));
    };
    auto counter = [&](const char* name, const char* help, double v) {
      MetricFamily f = Family(name, help, MetricType::Counter);
      f.metric.push_back(Value(MetricType::Counter, v, model));
      out.push_back(std::move(f));
    };
    if (src.ready) gauge("mxserve:ready", "1 when /health/ready says ready, else 0", src.ready() ? 1 : 0);
    if (src.engine) {
      const EngineStats e = src.engine();
      gauge("mxserve:num_requests_running", "Requests in the running batch", e.num_running);
      gauge("mxserve:num_requests_waiting", "Requests waiting to be scheduled", e.num_waiting);
      gauge("mxserve:kv_cache_usage_perc", "Fraction of KV-cache blocks in use (1 = 100%)",
            e.kv_blocks_total > 0 ? static_cast<double>(e.kv_blocks_used) / e.kv_blocks_total : 0);
      gauge("mxserve:kv_cache_blocks_total", "KV-cache blocks in the pool", e.kv_blocks_total);
      counter("mxserve:num_preemptions_total", "Sequences preempted (KV recomputed later)",
              static_cast<double>(e.num_preemptions));
      // vLLM's vllm:prefix_cache_queries / vllm:prefix_cache_hits, in tokens.
      counter("mxserve:prefix_cache_queries_total",
              "Prefix cache queries, in tokens of admitted requests",
              static_cast<double>(e.prefix_cache_queries));
      counter("mxserve:prefix_cache_hits_total", "Prefix cache hits, in tokens not computed again",
              static_cast<double>(e.prefix_cache_hits));
      counter("mxserve:engine_steps_total", "Engine steps that ran a batch",
              static_cast<double>(e.num_steps));
      counter("mxserve:prompt_tokens_computed_total",
              "Prefill tokens run, recomputation after preemption included",
              static_cast<double>(e.num_prompt_tokens_computed));
      gauge("mxserve:accepting_requests", "0 once draining (new requests get 503)",
            e.accepting ? 1 : 0);
    }
    if (src.router) {
      if (std::optional<RouterStats> r = src.router()) AddRouter(*r, model, &out);
    }
    if (src.supervisor) {
      if (std::optional<SupervisorStats> s = src.supervisor()) AddSupervisor(*s, model, &out);
    }
    return out;
  }

 private:
  static std::vector<ClientMetric::Label> WorkerLabels(const std::vector<ClientMetric::Label>& model,
                                                       const std::string& worker) {
    std::vector<ClientMetric::Label> l = model;
    l.push_back({"worker", worker});
    return l;
  }

  static void AddRouter(const RouterStats& r, const std::vector<ClientMetric::Label>& model,
                        std::vector<MetricFamily>* out) {
    MetricFamily up = Family("mxserve:worker_up", "1 while the router sends expert calls to the worker",
                             MetricType::Gauge);
    MetricFamily calls = Family("mxserve:expert_calls_total",
                                "RunExperts attempts sent to the worker (retries included)",
                                MetricType::Counter);
    MetricFamily fails = Family("mxserve:expert_call_failures_total",
                                "RunExperts attempts that failed", MetricType::Counter);
    MetricFamily sent = Family("mxserve:expert_call_sent_bytes_total",
                               "Expert-call request payload bytes", MetricType::Counter);
    MetricFamily recv = Family("mxserve:expert_call_received_bytes_total",
                               "Expert-call response payload bytes", MetricType::Counter);
    MetricFamily opens = Family("mxserve:expert_stream_opens_total",
                                "RunExpertsStreams opened to the worker (1 in steady state)",
                                MetricType::Counter);
    MetricFamily unary = Family("mxserve:expert_unary_calls_total",
                                "Expert calls sent unary instead of on the worker's stream",
                                MetricType::Counter);
    MetricFamily shm = Family("mxserve:expert_shared_memory",
                              "1 while the worker's expert calls carry their tensors through /dev/shm",
                              MetricType::Gauge);
    MetricFamily changes = Family("mxserve:worker_state_changes_total",
                                  "Worker up/down transitions", MetricType::Counter);
    MetricFamily lat = Family("mxserve:expert_call_latency_seconds",
                              "Latency of successful RunExperts calls", MetricType::Histogram);
    for (const BackendStats& b : r.backends) {
      const std::string name = "worker" + std::to_string(b.index);  // = the supervisor's label
      auto labels = WorkerLabels(model, name);
      auto with_addr = labels;
      with_addr.push_back({"address", b.address});
      up.metric.push_back(Value(MetricType::Gauge, b.state == BackendState::kUp ? 1 : 0, with_addr));
      calls.metric.push_back(Value(MetricType::Counter, static_cast<double>(b.calls), labels));
      fails.metric.push_back(Value(MetricType::Counter, static_cast<double>(b.call_failures), labels));
      sent.metric.push_back(Value(MetricType::Counter, static_cast<double>(b.bytes_sent), labels));
      recv.metric.push_back(Value(MetricType::Counter, static_cast<double>(b.bytes_received), labels));
      opens.metric.push_back(Value(MetricType::Counter, static_cast<double>(b.stream_opens), labels));
      unary.metric.push_back(Value(MetricType::Counter, static_cast<double>(b.unary_calls), labels));
      shm.metric.push_back(Value(MetricType::Gauge, b.shared_memory ? 1 : 0, labels));
      changes.metric.push_back(Value(MetricType::Counter, static_cast<double>(b.state_changes), labels));
      ClientMetric h;
      h.label = labels;
      h.histogram.sample_count = b.latency.count;
      h.histogram.sample_sum = b.latency.sum_s;
      uint64_t cumulative = 0;
      for (size_t i = 0; i < kLatencyBucketsS.size(); ++i) {
        cumulative += b.latency.counts[i];
        h.histogram.bucket.push_back({cumulative, kLatencyBucketsS[i]});
      }
      h.histogram.bucket.push_back({b.latency.count, std::numeric_limits<double>::infinity()});
      lat.metric.push_back(std::move(h));
    }
    for (MetricFamily* f : {&up, &calls, &fails, &sent, &recv, &opens, &unary, &shm, &changes, &lat}) {
      out->push_back(std::move(*f));
    }
    auto one = [&](const char* name, const char* help, MetricType type, double v) {
      MetricFamily f = Family(name, help, type);
      f.metric.push_back(Value(type, v, model));
      out->push_back(std::move(f));
    };
    one("mxserve:experts_without_host", "Experts none of whose hosts is up", MetricType::Gauge,
        r.experts_without_host);
    one("mxserve:expert_replicas", "Fewest hosts of any expert", MetricType::Gauge, r.replicas_min);
    one("mxserve:expert_call_retries_total", "Expert calls re-issued for any reason",
        MetricType::Counter, static_cast<double>(r.retries));
    one("mxserve:expert_call_failovers_total", "Expert calls re-issued on another replica",
        MetricType::Counter, static_cast<double>(r.failovers));
    one("mxserve:expert_call_waits_total", "Times a call waited for a down expert group",
        MetricType::Counter, static_cast<double>(r.waits));
    one("mxserve:expert_calls_given_up_total", "Expert groups given up on (requests failed)",
        MetricType::Counter, static_cast<double>(r.failed_calls));
  }

  static void AddSupervisor(const SupervisorStats& s, const std::vector<ClientMetric::Label>& model,
                            std::vector<MetricFamily>* out) {
    MetricFamily restarts = Family("mxserve:worker_restarts_total",
                                   "Local worker processes started after the first",
                                   MetricType::Counter);
    MetricFamily crashes = Family("mxserve:worker_crashes_total",
                                  "Local worker exits not asked for", MetricType::Counter);
    MetricFamily hangs = Family("mxserve:worker_hang_kills_total",
                                "Local workers SIGKILLed for not answering", MetricType::Counter);
    MetricFamily state = Family("mxserve:worker_process_state",
                                "1 for the supervisor's current state of each local worker",
                                MetricType::Gauge);
    for (const SupervisedWorkerStats& w : s.workers) {
      auto labels = WorkerLabels(model, "worker" + std::to_string(w.index));
      restarts.metric.push_back(Value(MetricType::Counter, static_cast<double>(w.restarts), labels));
      crashes.metric.push_back(Value(MetricType::Counter, static_cast<double>(w.crashes), labels));
      hangs.metric.push_back(Value(MetricType::Counter, static_cast<double>(w.hang_kills), labels));
      auto sl = labels;
      sl.push_back({"state", w.state});
      state.metric.push_back(Value(MetricType::Gauge, 1, sl));
    }
    for (MetricFamily* f : {&restarts, &crashes, &hangs, &state}) out->push_back(std::move(*f));
  }

  const std::string model_;
  mutable absl::Mutex mu_;
  MetricsSources sources_ ABSL_GUARDED_BY(mu_);
};

ServingMetrics::ServingMetrics(std::string model_name)
    : model_name_(std::move(model_name)),
      registry_(std::make_shared<prometheus::Registry>()),
      snapshots_(std::make_shared<SnapshotCollector>(model_name_)) {
  const prometheus::Labels model = {{"model_name", model_name_}};
  auto hist = [&](const char* name, const char* help, const std::vector<double>& buckets) {
    return &prometheus::BuildHistogram().Name(name).Help(help).Register(*registry_).Add(model, buckets);
  };
  auto counter = [&](const char* name, const char* help) {
    return &prometheus::BuildCounter().Name(name).Help(help).Register(*registry_).Add(model);
  };
  ttft_ = hist("mxserve:time_to_first_token_seconds", "Histogram of time to first token in seconds",
               TtftBuckets());
  itl_ = hist("mxserve:inter_token_latency_seconds", "Histogram of inter-token latency in seconds",
              InterTokenBuckets());
  e2e_ = hist("mxserve:e2e_request_latency_seconds",
              "Histogram of end-to-end request latency in seconds", E2eBuckets());
  step_ = hist("mxserve:step_duration_seconds",
               "Histogram of engine step time (schedule, model incl. expert calls, sample)",
               StepBuckets());
  iteration_tokens_ = hist("mxserve:iteration_tokens_total", "Histogram of tokens per engine step",
                           IterationTokenBuckets());
  request_prompt_tokens_ = hist("mxserve:request_prompt_tokens",
                                "Histogram of prompt tokens per finished request",
                                RequestTokenBuckets());
  request_generation_tokens_ = hist("mxserve:request_generation_tokens",
                                    "Histogram of generated tokens per finished request",
                                    RequestTokenBuckets());
  prompt_tokens_ = counter("mxserve:prompt_tokens_total", "Prefill tokens processed (per request, once)");
  generation_tokens_ = counter("mxserve:generation_tokens_total", "Generation tokens produced");
  failed_steps_ = counter("mxserve:engine_step_failures_total",
                          "Engine steps that failed (their requests ended with an error)");
  auto& finished = prometheus::BuildCounter()
                       .Name("mxserve:request_success_total")
                       .Help("Finished requests by finish reason (error: ended by a failure)")
                       .Register(*registry_);
  for (FinishReason r : {FinishReason::kNone, FinishReason::kStop, FinishReason::kLength,
                         FinishReason::kAbort, FinishReason::kError}) {
    prometheus::Labels l = model;
    l["finished_reason"] = FinishReasonName(r);
    finished_.push_back(r == FinishReason::kNone ? nullptr : &finished.Add(l));
  }
  rejected_ = &prometheus::BuildCounter()
                   .Name("mxserve:requests_rejected_total")
                   .Help("Requests refused before they started, by reason")
                   .Register(*registry_);
}

ServingMetrics::~ServingMetrics() = default;

void ServingMetrics::SetSources(MetricsSources sources) { snapshots_->Set(std::move(sources)); }

std::string ServingMetrics::Exposition() const {
  std::vector<MetricFamily> families = registry_->Collect();
  std::vector<MetricFamily> more = snapshots_->Collect();
  families.insert(families.end(), std::make_move_iterator(more.begin()),
                  std::make_move_iterator(more.end()));
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, families);
  return out.str();
}

void ServingMetrics::OnStep(const StepRecord& step) {
  step_->Observe(absl::ToDoubleSeconds(step.duration));
  iteration_tokens_->Observe(step.num_tokens);
  if (!step.ok) failed_steps_->Increment();
}

void ServingMetrics::OnFirstToken(absl::Duration ttft, int prompt_tokens) {
  ttft_->Observe(absl::ToDoubleSeconds(ttft));
  prompt_tokens_->Increment(prompt_tokens);
  generation_tokens_->Increment();
}

void ServingMetrics::OnNextTokens(int n, absl::Duration since_previous) {
  if (n <= 0) return;
  const double each = absl::ToDoubleSeconds(since_previous) / n;
  for (int i = 0; i < n; ++i) itl_->Observe(each);
  generation_tokens_->Increment(n);
}

void ServingMetrics::OnRequestFinished(const FinishedRequest& r) {
  e2e_->Observe(absl::ToDoubleSeconds(r.e2e));
  if (prometheus::Counter* c = finished_[static_cast<int>(r.reason)]) c->Increment();
  request_prompt_tokens_->Observe(r.prompt_tokens);
  request_generation_tokens_->Observe(r.generation_tokens);
}

void ServingMetrics::CountRejected(const std::string& reason) {
  prometheus::Labels l = {{"model_name", model_name_}, {"reason", reason}};
  rejected_->Add(l).Increment();
}

}  // namespace mxserve
