#include "coordinator/router/expert_router.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

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
  return std::unique_ptr<ExpertRouter>(
      new ExpertRouter(std::move(backends), std::move(placement), options));
}

ExpertRouter::ExpertRouter(std::vector<std::unique_ptr<ExpertBackend>> backends,
                           Placement placement, RouterOptions options)
    : backends_(std::move(backends)), placement_(std::move(placement)), options_(options) {
  slices_.resize(backends_.size());
  fanout_ = std::make_unique<Fanout>(static_cast<int>(backends_.size()) - 1);
}

ExpertRouter::~ExpertRouter() = default;

absl::Status ExpertRouter::Run(int layer, int num_tokens, int hidden, int top_k, const float* x,
                               const int32_t* expert_ids, const float* weights, float* out) {
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
  // Every slot on one backend (single-process mode, or a batch that happens to land on one
  // worker): hand it the caller's buffers, with no gather and no sum.
  const int first = placement_.Primary(expert_ids[0]);
  bool one_backend = true;
  for (size_t i = 1; i < T * k && one_backend; ++i) one_backend = placement_.Primary(expert_ids[i]) == first;
  if (one_backend) {
    ExpertCall call{layer, num_tokens, hidden, top_k, x, expert_ids, weights};
    absl::Status st = backends_[first]->RunExperts(call, out, absl::Now() + options_.call_timeout);
    if (!st.ok()) return absl::Status(st.code(), absl::StrCat("layer ", layer, ": ", st.message()));
    return absl::OkStatus();
  }
  for (Slice& s : slices_) {
    s.tokens.clear();
    s.x.clear();
    s.ids.clear();
    s.weights.clear();
    s.last_token = -1;
    s.status = absl::OkStatus();
  }
  // Each slot goes to its expert's primary backend; a token joins every backend it has a slot
  // on, with its other slots marked -1 there.
  for (size_t t = 0; t < T; ++t) {
    for (size_t j = 0; j < k; ++j) {
      const int e = expert_ids[t * k + j];
      Slice& s = slices_[placement_.Primary(e)];
      if (s.last_token != static_cast<int>(t)) {
        s.last_token = static_cast<int>(t);
        s.tokens.push_back(static_cast<int>(t));
        s.x.insert(s.x.end(), x + t * H, x + (t + 1) * H);
        s.ids.insert(s.ids.end(), k, -1);
        s.weights.insert(s.weights.end(), weights + t * k, weights + (t + 1) * k);
      }
      s.ids[(s.tokens.size() - 1) * k + j] = e;
    }
  }

  const absl::Time deadline = absl::Now() + options_.call_timeout;
  std::vector<std::function<void()>> tasks;
  for (size_t b = 0; b < slices_.size(); ++b) {
    Slice& s = slices_[b];
    if (s.tokens.empty()) continue;
    s.out.resize(s.tokens.size() * H);
    tasks.push_back([this, b, &s, layer, hidden, top_k, deadline] {
      ExpertCall call;
      call.layer = layer;
      call.num_tokens = static_cast<int>(s.tokens.size());
      call.hidden = hidden;
      call.top_k = top_k;
      call.x = s.x.data();
      call.expert_ids = s.ids.data();
      call.weights = s.weights.data();
      // Failover hook: on UNAVAILABLE / DEADLINE_EXCEEDED these slots would be re-sent to the
      // next backend in placement_.BackendsOf(e); with one copy per expert there is none.
      s.status = backends_[b]->RunExperts(call, s.out.data(), deadline);
    });
  }
  fanout_->Run(tasks);

  for (size_t b = 0; b < slices_.size(); ++b) {
    if (!slices_[b].status.ok()) {
      const absl::Status& st = slices_[b].status;
      return absl::Status(st.code(), absl::StrCat("layer ", layer, ": ", st.message()));
    }
  }
  std::memset(out, 0, T * H * sizeof(float));
  for (const Slice& s : slices_) {  // fixed backend order: deterministic sums
    for (size_t i = 0; i < s.tokens.size(); ++i) {
      float* o = out + static_cast<size_t>(s.tokens[i]) * H;
      const float* p = s.out.data() + i * H;
      for (size_t h = 0; h < H; ++h) o[h] += p[h];
    }
  }
  return absl::OkStatus();
}

}  // namespace mxserve
