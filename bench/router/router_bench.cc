// mxserve-bench-router: the coordinator's own cost of one MoE layer's fan-out (ExpertRouter::Run:
// slicing the batch per worker group, gathering each group's activation rows, summing the
// partial sums back per token), with backends that only write their output (a constant), so no
// transport and no kernel is timed. gpt-oss-120b shape: H = 2880, E = 128, top-4, uniform random
// routing. Beside it, in the same run: the same work done the obvious serial way (all gathers,
// then all sums, on the calling thread, buffers reused across calls: the twin that ExpertRouter's
// parallel gathers and sums are measured against) and the one-group hand-over (no slicing). Prints a markdown table; median of 15 runs.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "coordinator/router/expert_router.h"
#include "coordinator/router/placement.h"

namespace mxserve {
namespace {

constexpr int kHidden = 2880, kExperts = 128, kTopK = 4, kReps = 15;

class ConstBackend final : public ExpertBackend {
 public:
  absl::Status RunExperts(const ExpertBatch& call, float* out, absl::Time) override {
    std::fill(out, out + size_t(call.num_tokens) * call.hidden, 0.5f);
    return absl::OkStatus();
  }
  std::string name() const override { return "const"; }
};

// The serial reference: ExpertRouter's slicing as it was (gather while slicing, sum after).
// Its buffers persist across calls, as the router's did.
struct SerialSlice { std::vector<int> tokens; std::vector<float> x, out; int last = -1; };
void SerialReference(std::vector<SerialSlice>& s, int T, const std::vector<float>& x,
                     const std::vector<int32_t>& ids, std::vector<float>& out) {
  using S = SerialSlice;
  const int groups = static_cast<int>(s.size());
  for (S& g : s) {
    g.tokens.clear();
    g.x.clear();
    g.last = -1;
  }
  const size_t H = kHidden;
  for (int t = 0; t < T; ++t) {
    for (int j = 0; j < kTopK; ++j) {
      S& g = s[ids[t * kTopK + j] / (kExperts / groups)];
      if (g.last != t) {
        g.last = t;
        g.tokens.push_back(t);
        g.x.insert(g.x.end(), x.data() + t * H, x.data() + (t + 1) * H);
      }
    }
  }
  for (S& g : s) g.out.assign(g.tokens.size() * H, 0.5f);  // what the backends write
  std::memset(out.data(), 0, out.size() * sizeof(float));
  for (const S& g : s) {
    for (size_t i = 0; i < g.tokens.size(); ++i) {
      float* o = out.data() + g.tokens[i] * H;
      const float* p = g.out.data() + i * H;
      for (size_t h = 0; h < H; ++h) o[h] += p[h];
    }
  }
}

template <typename F>
double MedianMs(F f) {
  std::vector<double> ms;
  for (int r = 0; r < kReps; ++r) {
    const absl::Time t0 = absl::Now();
    f();
    ms.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

int Main() {
  std::printf("# mxserve-bench-router: H=%d E=%d top-%d, %u hardware threads\n", kHidden, kExperts, kTopK,
              std::thread::hardware_concurrency());
  std::printf("| tokens | worker groups | ExpertRouter::Run ms | serial reference ms | one group (no slicing) ms |\n");
  std::printf("|---|---|---|---|---|\n");
  std::mt19937 rng(7);
  for (int T : {1, 64, 1024, 4096}) {
    std::vector<float> x(size_t(T) * kHidden), w(size_t(T) * kTopK, 0.25f), out(x.size());
    for (float& v : x) v = float(rng() % 1000) / 1000.f;
    std::vector<int32_t> ids(size_t(T) * kTopK);
    for (int t = 0; t < T; ++t) {  // top-k distinct experts per token
      std::vector<int> e(kExperts);
      for (int i = 0; i < kExperts; ++i) e[i] = i;
      std::shuffle(e.begin(), e.end(), rng);
      std::copy(e.begin(), e.begin() + kTopK, ids.begin() + size_t(t) * kTopK);
    }
    auto make = [](int groups) {
      std::vector<std::unique_ptr<ExpertBackend>> b;
      for (int i = 0; i < groups; ++i) b.push_back(std::make_unique<ConstBackend>());
      return *ExpertRouter::Create(std::move(b), *Placement::Contiguous(kExperts, groups));
    };
    auto one = make(1);
    const double single = MedianMs([&] { (void)one->Run(ExpertBatch{{T, kTopK, x.data(), ids.data(), w.data()}, 0, kHidden}, out.data()); });
    for (int groups : {2, 8}) {
      auto router = make(groups);
      const double ours = MedianMs([&] {
        (void)router->Run(ExpertBatch{{T, kTopK, x.data(), ids.data(), w.data()}, 0, kHidden}, out.data());
      });
      std::vector<SerialSlice> slices(groups);
      const double serial = MedianMs([&] { SerialReference(slices, T, x, ids, out); });
      std::printf("| %d | %d | %.3f | %.3f | %.3f |\n", T, groups, ours, serial, single);
    }
  }
  return 0;
}

}  // namespace
}  // namespace mxserve

int main() { return mxserve::Main(); }
