#include "coordinator/router/expert_router.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "nlohmann/json.hpp"

namespace mxserve {

// Long-lived threads that run one task each per round, so a layer's backend calls go out at
// once without paying thread creation on every layer of every step.
class ExpertRouter::Fanout {
 public:
  explicit Fanout(int n) : slots_(n) {
    for (int i = 0; i < n; ++i) threads_.emplace_back([this, i] { Loop(i); });
  }
  ~Fanout() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  // Runs tasks[0] on the caller and tasks[i] on thread i-1; returns when all have finished.
  void Run(const std::vector<std::function<void()>>& tasks) {
    const int extra = static_cast<int>(tasks.size()) - 1;
    {
      std::lock_guard<std::mutex> l(mu_);
      for (int i = 0; i < extra; ++i) slots_[i] = &tasks[i + 1];
      pending_ = extra;
      ++round_;
    }
    cv_.notify_all();
    if (!tasks.empty()) tasks[0]();
    std::unique_lock<std::mutex> l(mu_);
    done_cv_.wait(l, [&] { return pending_ == 0; });
  }

 private:
  void Loop(int i) {
    uint64_t seen = 0;
    while (true) {
      const std::function<void()>* task = nullptr;
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return stop_ || (round_ != seen && slots_[i] != nullptr); });
        if (stop_) return;
        seen = round_;
        task = slots_[i];
        slots_[i] = nullptr;
      }
      (*task)();
      {
        std::lock_guard<std::mutex> l(mu_);
        --pending_;
      }
      done_cv_.notify_one();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::vector<const std::function<void()>*> slots_;
  std::vector<std::thread> threads_;
  int pending_ = 0;
  uint64_t round_ = 0;
  bool stop_ = false;
};

absl::StatusOr<std::unique_ptr<ExpertRouter>> ExpertRouter::Create(
    std::vector<std::unique_ptr<ExpertBackend>> backends, Placement placement,
    RouterOptions options) {
  if (backends.empty()) return absl::InvalidArgumentError("expert router: no backends");
  if (static_cast<int>(backends.size()) != placement.num_backends()) {
    return absl::InvalidArgumentError(absl::StrCat("expert router: ", backends.size(),
                                                   " backends but the placement has ",
                                                   placement.num_backends()));
  }
  for (size_t b = 0; b < backends.size(); ++b) {
    if (backends[b] == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("expert router: backend ", b, " is null"));
    }
  }
  if (options.call_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("expert router: call_timeout must be > 0");
  }
  if (options.down_wait < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("expert router: down_wait must be >= 0");
  }
  return std::unique_ptr<ExpertRouter>(
      new ExpertRouter(std::move(backends), std::move(placement), options));
}

ExpertRouter::ExpertRouter(std::vector<std::unique_ptr<ExpertBackend>> backends,
                           Placement placement, RouterOptions options)
    : backends_(std::move(backends)), placement_(std::move(placement)), options_(options) {
  slices_.resize(placement_.num_groups());
  fanout_ = std::make_unique<Fanout>(placement_.num_groups() - 1);
  absl::MutexLock l(&health_mu_);
  health_.resize(backends_.size());
  for (Health& h : health_) h.since = absl::Now();
}

ExpertRouter::~ExpertRouter() {
  watcher_.reset();  // its threads call OnWorkerHealth
}

void ExpertRouter::AttachWatcher(std::unique_ptr<WorkerWatcher> watcher) {
  watcher_ = std::move(watcher);
}

namespace {
std::string Stamp() { return absl::FormatTime("%H:%M:%E3S", absl::Now(), absl::UTCTimeZone()); }
}  // namespace

void ExpertRouter::OnWorkerHealth(int index, bool up, bool unresponsive, const std::string& reason) {
  if (index < 0 || index >= num_backends()) return;
  const BackendState to = up ? BackendState::kUp : BackendState::kDown;
  bool changed = false;
  {
    absl::MutexLock l(&health_mu_);
    Health& h = health_[index];
    changed = h.state != to;
    if (changed) {
      h.state = to;
      h.since = absl::Now();
      ++h.changes;
    }
    if (!up && unresponsive && !h.unresponsive) h.unresponsive_since = absl::Now();
    // While down, keep the cause: "unreachable" after "killed by signal 9" says less.
    if (changed || up || !unresponsive) h.reason = reason;
    h.unresponsive = !up && unresponsive;
  }
  if (changed && options_.log_state_changes) {
    const std::string addr = backends_[index]->address();
    fprintf(stderr, "mxserve-coordinator: %s worker %d %s%s%s: %s\n", Stamp().c_str(), index,
            up ? "UP" : "DOWN", addr.empty() ? "" : " at ", addr.c_str(), reason.c_str());
  }
}

absl::Status ExpertRouter::ReconnectBackend(int b, const std::string& address) {
  if (b < 0 || b >= num_backends()) return absl::InvalidArgumentError(absl::StrCat("no backend ", b));
  OnWorkerHealth(b, false, false, absl::StrCat("restarted at ", address, ", waiting for SERVING"));
  absl::Status s = backends_[b]->Reconnect(address);
  if (!s.ok()) return s;
  if (watcher_) watcher_->Poke(b);
  return absl::OkStatus();
}

void ExpertRouter::Shutdown() {
  absl::MutexLock l(&health_mu_);
  shutting_down_ = true;
}

bool ExpertRouter::IsUp(int b) const {
  absl::MutexLock l(&health_mu_);
  return health_[b].state == BackendState::kUp;
}

std::optional<absl::Time> ExpertRouter::UnresponsiveSince(int b) const {
  absl::MutexLock l(&health_mu_);
  const Health& h = health_[b];
  if (h.state == BackendState::kDown && h.unresponsive) return h.unresponsive_since;
  return std::nullopt;
}

bool ExpertRouter::AllExpertsServed() const {
  absl::MutexLock l(&health_mu_);
  for (int g = 0; g < placement_.num_groups(); ++g) {
    bool any = false;
    for (int b : placement_.GroupHosts(g)) any = any || health_[b].state == BackendState::kUp;
    if (!any) return false;
  }
  return true;
}

int ExpertRouter::PickHost(int g, int layer) const {
  const std::vector<int>& hosts = placement_.GroupHosts(g);
  const int n = static_cast<int>(hosts.size());
  for (int i = 0; i < n; ++i) {
    const int b = hosts[(layer + i) % n];
    if (health_[b].state == BackendState::kUp) return b;
  }
  return -1;
}

std::string ExpertRouter::GroupName(int g) const {
  auto [begin, end] = placement_.GroupRange(g);
  return begin + 1 == end ? absl::StrCat("expert ", begin)
                          : absl::StrCat("experts ", begin, "-", end - 1);
}

void ExpertRouter::Record(int b, const absl::Status& s, absl::Duration latency) {
  absl::MutexLock l(&health_mu_);
  Health& h = health_[b];
  ++h.calls;
  if (!s.ok()) {
    ++h.failures;
    return;
  }
  const double secs = absl::ToDoubleSeconds(latency);
  size_t i = 0;
  while (i < kLatencyBucketsS.size() && secs > kLatencyBucketsS[i]) ++i;
  ++h.latency.counts[i];
  h.latency.sum_s += secs;
  ++h.latency.count;
}

absl::Status ExpertRouter::RunGroup(int g, const ExpertBatch& call, float* out) {
  absl::Status last_error;
  int last_backend = -1;
  // Set at the first failure or the first time no host is up: the bound on trying.
  absl::Time give_up = absl::InfiniteFuture();
  bool counted_wait = false;
  // A late call may be a slow batch rather than a hung worker (keepalive catches hangs): each
  // retry after DEADLINE_EXCEEDED gets twice the time, up to 8x.
  absl::Duration timeout = options_.call_timeout;
  while (true) {
    int b = -1;
    {
      absl::MutexLock l(&health_mu_);
      if (shutting_down_) {
        ++failed_calls_;
        return absl::UnavailableError(absl::StrCat(GroupName(g), ": the coordinator is shutting down",
                                                   last_error.ok() ? "" : absl::StrCat("; last error: ", last_error.message())));
      }
      b = PickHost(g, call.layer);
      if (b < 0) {
        if (give_up == absl::InfiniteFuture()) give_up = absl::Now() + options_.down_wait;
        if (!counted_wait) {
          ++waits_;
          counted_wait = true;
        }
        auto some_up = [this, g] {
          health_mu_.AssertReaderHeld();  // Await evaluates the condition under the lock
          return shutting_down_ || PickHost(g, 0) >= 0;
        };
        health_mu_.AwaitWithDeadline(absl::Condition(&some_up), give_up);
        b = shutting_down_ ? -1 : PickHost(g, call.layer);
        if (b < 0) {
          ++failed_calls_;
          std::vector<std::string> names;
          for (int h : placement_.GroupHosts(g))
            names.push_back(absl::StrCat("worker ", h, ": ", health_[h].reason));
          return absl::UnavailableError(absl::StrCat(
              GroupName(g), ": no healthy worker within ", absl::FormatDuration(options_.down_wait),
              " (", absl::StrJoin(names, "; "), ")",
              last_error.ok() ? "" : absl::StrCat("; last error: ", last_error.message())));
        }
      }
      if (last_backend >= 0) {
        ++retries_;
        if (b != last_backend) ++failovers_;
      }
    }
    const absl::Time start = absl::Now();
    absl::Status s = backends_[b]->RunExperts(call, out, start + timeout);
    Record(b, s, absl::Now() - start);
    if (s.ok()) return s;
    const bool retriable = s.code() == absl::StatusCode::kUnavailable ||
                           s.code() == absl::StatusCode::kDeadlineExceeded;
    if (!retriable) return s;
    last_error = s;
    last_backend = b;
    if (s.code() == absl::StatusCode::kDeadlineExceeded)
      timeout = std::min(timeout * 2, options_.call_timeout * 8);
    OnWorkerHealth(b, false, true, absl::StrCat("call failed: ", s.message()));
    if (watcher_) watcher_->Poke(b);
    if (give_up == absl::InfiniteFuture()) give_up = absl::Now() + options_.down_wait;
    if (absl::Now() >= give_up) {
      absl::MutexLock l(&health_mu_);
      ++failed_calls_;
      return absl::UnavailableError(absl::StrCat(GroupName(g), ": gave up after ",
                                                 absl::FormatDuration(options_.down_wait),
                                                 "; last error: ", s.message()));
    }
  }
}

absl::Status ExpertRouter::Run(const ExpertBatch& batch, float* out) {
  const int layer = batch.layer, num_tokens = batch.num_tokens;
  const int hidden = batch.hidden, top_k = batch.top_k;
  const float* const x = batch.x;
  const int32_t* const expert_ids = batch.expert_ids;
  const float* const weights = batch.weights;
  if (num_tokens < 0) return absl::InvalidArgumentError(absl::StrCat("num_tokens ", num_tokens, " < 0"));
  if (hidden < 1) return absl::InvalidArgumentError(absl::StrCat("hidden ", hidden, " < 1"));
  if (top_k < 1) return absl::InvalidArgumentError(absl::StrCat("top_k ", top_k, " < 1"));
  if (layer < 0) return absl::InvalidArgumentError(absl::StrCat("layer ", layer, " < 0"));
  const size_t T = num_tokens, H = hidden, k = top_k;
  const int E = placement_.num_experts();
  for (size_t i = 0; i < T * k; ++i) {
    if (expert_ids[i] < 0 || expert_ids[i] >= E) {
      return absl::InvalidArgumentError(absl::StrCat("expert_ids[", i, "] = ", expert_ids[i],
                                                     " not in [0, ", E, ")"));
    }
  }
  if (T == 0) return absl::OkStatus();

  absl::MutexLock lock(&mu_);
  // Every slot in one group (single-process mode, or a batch that happens to land in one
  // group): hand the caller's buffers over, with no gather and no sum. The slice would be
  // the same tokens with the same ids, so the result is the same.
  const int first = placement_.GroupOf(expert_ids[0]);
  bool one_group = true;
  for (size_t i = 1; i < T * k && one_group; ++i) one_group = placement_.GroupOf(expert_ids[i]) == first;
  if (one_group) {
    absl::Status st = RunGroup(first, batch, out);
    if (!st.ok()) return absl::Status(st.code(), absl::StrCat("layer ", layer, ": ", st.message()));
    return absl::OkStatus();
  }
  for (Slice& s : slices_) {
    s.tokens.clear();
    s.ids.clear();
    s.weights.clear();
    s.row_of.assign(T, -1);
    s.status = absl::OkStatus();
  }
  // Each slot goes to its expert's group; a token joins every group it has a slot in, with
  // its other slots marked -1 there. (Only the small arrays here: each group's task gathers
  // its own activation rows, so the copies run in parallel with each other and with the calls.)
  for (size_t t = 0; t < T; ++t) {
    for (size_t j = 0; j < k; ++j) {
      const int e = expert_ids[t * k + j];
      Slice& s = slices_[placement_.GroupOf(e)];
      if (s.row_of[t] < 0) {  // the token's first slot in this group
        s.row_of[t] = static_cast<int>(s.tokens.size());
        s.tokens.push_back(static_cast<int>(t));
        s.ids.insert(s.ids.end(), k, -1);
        s.weights.insert(s.weights.end(), weights + t * k, weights + (t + 1) * k);
      }
      s.ids[(s.tokens.size() - 1) * k + j] = e;
    }
  }

  std::vector<std::function<void()>> tasks;
  for (size_t g = 0; g < slices_.size(); ++g) {
    Slice& s = slices_[g];
    if (s.tokens.empty()) continue;
    tasks.push_back([this, g, &s, &batch, x, H] {
      s.x.resize(s.tokens.size() * H);
      for (size_t i = 0; i < s.tokens.size(); ++i) {
        std::memcpy(s.x.data() + i * H, x + static_cast<size_t>(s.tokens[i]) * H, H * sizeof(float));
      }
      s.out.resize(s.tokens.size() * H);
      ExpertBatch call = batch;  // the layer, width and k; this group's tokens
      call.num_tokens = static_cast<int>(s.tokens.size());
      call.x = s.x.data();
      call.expert_ids = s.ids.data();
      call.weights = s.weights.data();
      s.status = RunGroup(static_cast<int>(g), call, s.out.data());
    });
  }
  fanout_->Run(tasks);

  for (size_t g = 0; g < slices_.size(); ++g) {
    if (!slices_[g].status.ok()) {
      const absl::Status& st = slices_[g].status;
      return absl::Status(st.code(), absl::StrCat("layer ", layer, ": ", st.message()));
    }
  }
  // out[t] = 0 + the token's partial sums in group order (fixed: deterministic sums). Large
  // batches sum token ranges in parallel on the fan-out threads; small ones here, where waking
  // the threads would cost more than the sums (bench/router).
  // The fan-out threads read the slices while this thread holds mu_ and waits for them.
  const std::vector<Slice>* slices = &slices_;
  auto sum = [slices, H, out](size_t t0, size_t t1) {
    for (size_t t = t0; t < t1; ++t) {
      float* o = out + t * H;
      std::memset(o, 0, H * sizeof(float));
      for (const Slice& s : *slices) {
        if (s.row_of[t] < 0) continue;
        const float* p = s.out.data() + static_cast<size_t>(s.row_of[t]) * H;
        for (size_t h = 0; h < H; ++h) o[h] += p[h];
      }
    }
  };
  const size_t parts = T * H >= (size_t(1) << 17) ? std::min(slices_.size(), T) : 1;
  if (parts == 1) {
    sum(0, T);
  } else {
    tasks.clear();
    for (size_t c = 0; c < parts; ++c) tasks.push_back([&sum, c, parts, T] { sum(T * c / parts, T * (c + 1) / parts); });
    fanout_->Run(tasks);
  }
  return absl::OkStatus();
}

RouterStats ExpertRouter::Stats() const {
  RouterStats st;
  st.replicas_min = placement_.MinReplicas();
  const absl::Time now = absl::Now();
  absl::MutexLock l(&health_mu_);
  for (int b = 0; b < num_backends(); ++b) {
    const Health& h = health_[b];
    BackendStats bs;
    bs.index = b;
    bs.name = backends_[b]->name();
    bs.address = backends_[b]->address();
    bs.state = h.state;
    bs.reason = h.reason;
    bs.seconds_in_state = absl::ToDoubleSeconds(now - h.since);
    bs.experts = placement_.ExpertsOf(b);
    bs.calls = h.calls;
    bs.call_failures = h.failures;
    bs.state_changes = h.changes;
    bs.bytes_sent = backends_[b]->bytes_sent();
    bs.bytes_received = backends_[b]->bytes_received();
    bs.stream_opens = backends_[b]->stream_opens();
    bs.unary_calls = backends_[b]->unary_calls();
    bs.shared_memory = backends_[b]->shared_memory();
    bs.latency = h.latency;
    st.backends.push_back(std::move(bs));
  }
  for (int e = 0; e < placement_.num_experts(); ++e) {
    bool any = false;
    for (int b : placement_.BackendsOf(e)) any = any || health_[b].state == BackendState::kUp;
    if (!any) ++st.experts_without_host;
  }
  st.retries = retries_;
  st.failovers = failovers_;
  st.waits = waits_;
  st.failed_calls = failed_calls_;
  return st;
}

std::string ExpertRouter::PlacementJson(const SupervisorStats* supervisor) const {
  RouterStats st = Stats();
  nlohmann::json workers = nlohmann::json::array();
  for (const BackendStats& b : st.backends) {
    nlohmann::json w = {{"index", b.index},
                        {"name", b.name},
                        {"address", b.address},
                        {"state", BackendStateName(b.state)},
                        {"reason", b.reason},
                        {"seconds_in_state", b.seconds_in_state},
                        {"experts", IdRanges(b.experts)},
                        {"calls", b.calls},
                        {"call_failures", b.call_failures},
                        {"bytes_sent", b.bytes_sent},
                        {"bytes_received", b.bytes_received},
                        {"transport", b.shared_memory ? "shared_memory" : "grpc"}};
    if (supervisor != nullptr && b.index < static_cast<int>(supervisor->workers.size())) {
      const SupervisedWorkerStats& s = supervisor->workers[b.index];
      w["pid"] = s.pid;
      w["process_state"] = s.state;
      w["restarts"] = s.restarts;
      w["crashes"] = s.crashes;
      w["hang_kills"] = s.hang_kills;
      w["last_exit"] = s.last_exit;
    }
    workers.push_back(std::move(w));
  }
  nlohmann::json groups = nlohmann::json::array();
  for (int g = 0; g < placement_.num_groups(); ++g) {
    auto [begin, end] = placement_.GroupRange(g);
    groups.push_back({{"experts", absl::StrCat(begin, "-", end - 1)},
                      {"hosts", placement_.GroupHosts(g)}});
  }
  nlohmann::json j = {{"replicas", st.replicas_min},
                      {"experts_without_host", st.experts_without_host},
                      {"call_timeout_ms", absl::ToInt64Milliseconds(options_.call_timeout)},
                      {"down_wait_ms", absl::ToInt64Milliseconds(options_.down_wait)},
                      {"retries", st.retries},
                      {"failovers", st.failovers},
                      {"waits", st.waits},
                      {"failed_calls", st.failed_calls},
                      {"workers", std::move(workers)},
                      {"groups", std::move(groups)}};
  if (supervisor != nullptr) j["restarts_enabled"] = supervisor->restarts_enabled;
  return j.dump();
}

std::string IdRanges(const std::vector<int>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
    absl::StrAppend(&s, i ? "," : "", ids[i]);
    if (j > i) absl::StrAppend(&s, "-", ids[j]);
    i = j + 1;
  }
  return s;
}

}  // namespace mxserve
