// The coordinator's Prometheus metrics for GET /metrics (text exposition format 0.0.4), kept in
// prometheus-cpp's registry. Names carry the `mxserve:` prefix and follow vLLM's where the
// meaning is the same (num_requests_running, time_to_first_token_seconds, ...). Request and
// step timings are observed live (this is the engine's EngineObserver); gauges and the expert
// router's and supervisor's counters are read from their snapshots at scrape time.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/engine/engine.h"
#include "coordinator/engine/engine_observer.h"
#include "coordinator/router/router_stats.h"

namespace prometheus {
class Registry;
class Histogram;
class Counter;
template <typename T>
class Family;
}  // namespace prometheus

namespace mxserve {

// Where the scrape-time metrics come from; each may be empty (its metrics are left out).
struct MetricsSources {
  std::function<EngineStats()> engine;
  std::function<std::optional<RouterStats>()> router;
  std::function<std::optional<SupervisorStats>()> supervisor;
  std::function<bool()> ready;  // mxserve:ready
};

// Bucket bounds (seconds or tokens), as vLLM has them, with finer low ends for GPU steps.
const std::vector<double>& TtftBuckets();
const std::vector<double>& InterTokenBuckets();
const std::vector<double>& E2eBuckets();
const std::vector<double>& StepBuckets();
const std::vector<double>& IterationTokenBuckets();
const std::vector<double>& RequestTokenBuckets();

class ServingMetrics final : public EngineObserver {
 public:
  // Every series carries model_name="<model_name>" (vLLM does the same).
  explicit ServingMetrics(std::string model_name);
  ~ServingMetrics() override;
  ServingMetrics(const ServingMetrics&) = delete;
  ServingMetrics& operator=(const ServingMetrics&) = delete;

  // Set before the first scrape; not changed afterwards.
  void SetSources(MetricsSources sources);
  // The whole page. Thread-safe.
  std::string Exposition() const;

  // EngineObserver (engine loop thread).
  void OnStep(const StepRecord& step) override;
  void OnFirstToken(absl::Duration ttft, int prompt_tokens) override;
  void OnNextTokens(int n, absl::Duration since_previous) override;
  void OnRequestFinished(const FinishedRequest& request) override;
  void OnRejected(const char* reason) override { CountRejected(reason); }

  // Requests refused before they started (503 while draining or not ready, 429 queue full),
  // by reason: mxserve:requests_rejected_total{reason}.
  void CountRejected(const std::string& reason);

 private:
  class SnapshotCollector;
  const std::string model_name_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<SnapshotCollector> snapshots_;
  prometheus::Histogram* ttft_ = nullptr;
  prometheus::Histogram* itl_ = nullptr;
  prometheus::Histogram* e2e_ = nullptr;
  prometheus::Histogram* step_ = nullptr;
  prometheus::Histogram* iteration_tokens_ = nullptr;
  prometheus::Histogram* request_prompt_tokens_ = nullptr;
  prometheus::Histogram* request_generation_tokens_ = nullptr;
  prometheus::Counter* prompt_tokens_ = nullptr;
  prometheus::Counter* generation_tokens_ = nullptr;
  prometheus::Counter* failed_steps_ = nullptr;
  std::vector<prometheus::Counter*> finished_;  // by FinishReason
  prometheus::Family<prometheus::Counter>* rejected_ = nullptr;
};

}  // namespace mxserve
