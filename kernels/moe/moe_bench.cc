// mxserve-bench-moe-cpu: the CPU MoE kernels (plain oracle vs fast path) on random MXFP4
// experts, printed as a markdown table. Routing is uniform random top-k, re-drawn for every
// repetition so that the experts read differ from rep to rep (a 4-expert, 53 MB working set
// of a gpt-oss-20b layer does not fit in a 32 MB L3 anyway).
//
//   mxserve-bench-moe-cpu [--threads 2] [--reps 7] [--isa avx512|avx2|scalar]
//                         [--shapes tiny,20b,120b,hot] [--tokens 1,16,128] [--plain-max-tokens 16]
//
// The plain kernel is strictly token by token, so when a batch would take it more than ~2 s
// it is timed on --plain-max-tokens tokens and scaled linearly (marked "~").
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/moe/moe.h"
#include "kernels/moe/moe_fast.h"

namespace mxserve::kernels {
namespace {

struct Rng {  // splitmix64: fast enough to fill 400+ MB of weights
  uint64_t s;
  uint64_t Next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  float Uniform() { return static_cast<float>(Next() >> 40) / static_cast<float>(1 << 24); }
};

struct Shape {
  std::string name;
  int H, I, E, k;
};

struct Layer {
  std::vector<uint8_t> gu_blocks, gu_scales, dn_blocks, dn_scales;
  std::vector<float> gu_bias, dn_bias;
  std::vector<ExpertWeights> experts;
  MoeLayer layer;
  int64_t bytes_per_expert = 0;

  explicit Layer(const Shape& s) {
    const int64_t H = s.H, I = s.I, E = s.E;
    Rng rng{12345};
    auto fill_blocks = [&](std::vector<uint8_t>& v, int64_t n) {
      v.resize(n);
      for (int64_t i = 0; i < n; i += 8) {
        const uint64_t r = rng.Next();
        std::memcpy(v.data() + i, &r, std::min<int64_t>(8, n - i));
      }
    };
    auto fill_scales = [&](std::vector<uint8_t>& v, int64_t n) {
      v.resize(n);
      for (auto& b : v) b = static_cast<uint8_t>(118 + rng.Next() % 10);
    };
    fill_blocks(gu_blocks, E * 2 * I * H / 2);
    fill_scales(gu_scales, E * 2 * I * H / 32);
    fill_blocks(dn_blocks, E * H * I / 2);
    fill_scales(dn_scales, E * H * I / 32);
    gu_bias.resize(E * 2 * I);
    dn_bias.resize(E * H);
    for (auto& b : gu_bias) b = rng.Uniform() - 0.5f;
    for (auto& b : dn_bias) b = rng.Uniform() - 0.5f;
    experts.resize(E);
    layer.hidden = s.H;
    layer.intermediate = s.I;
    for (int64_t e = 0; e < E; ++e) {
      experts[e].gate_up = {gu_blocks.data() + e * 2 * I * H / 2,
                            gu_scales.data() + e * 2 * I * H / 32, static_cast<int>(2 * I),
                            static_cast<int>(H)};
      experts[e].gate_up_bias = gu_bias.data() + e * 2 * I;
      experts[e].down = {dn_blocks.data() + e * H * I / 2, dn_scales.data() + e * H * I / 32,
                         static_cast<int>(H), static_cast<int>(I)};
      experts[e].down_bias = dn_bias.data() + e * H;
      layer.experts.push_back(&experts[e]);
    }
    bytes_per_expert = 3 * H * I / 2 + 3 * H * I / 32;
  }
};

struct Batch {
  std::vector<float> x, weights;
  std::vector<int32_t> ids;
  MoeBatch batch;
  int distinct = 0;
  Batch(const Shape& s, int T, uint64_t seed) {
    Rng rng{seed};
    x.resize(static_cast<size_t>(T) * s.H);
    for (auto& v : x) v = 2.0f * rng.Uniform() - 1.0f;
    ids.resize(static_cast<size_t>(T) * s.k);
    weights.resize(ids.size());
    std::vector<int> perm(s.E);
    std::vector<char> hit(s.E, 0);
    for (int t = 0; t < T; ++t) {
      std::iota(perm.begin(), perm.end(), 0);
      for (int j = 0; j < s.k; ++j) {  // partial Fisher-Yates: k distinct experts
        std::swap(perm[j], perm[j + rng.Next() % (s.E - j)]);
        ids[t * s.k + j] = perm[j];
        weights[t * s.k + j] = 1.0f / s.k;
        hit[perm[j]] = 1;
      }
    }
    distinct = static_cast<int>(std::count(hit.begin(), hit.end(), 1));
    batch = {T, s.k, x.data(), ids.data(), weights.data()};
  }
};

double NowMs() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// CPU time of the whole process (all threads): with a busy shared machine, wall time includes
// time our threads sat preempted; CPU time / threads is what the kernel would take alone.
double CpuMs() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  size_t p = 0;
  while (p <= s.size()) {
    const size_t q = std::min(s.find(',', p), s.size());
    if (q > p) out.push_back(s.substr(p, q - p));
    p = q + 1;
  }
  return out;
}

int Main(int argc, char** argv) {
  int threads = 2, reps = 7, plain_max_tokens = 16;
  bool plain_on = true;
  std::string isa_name, shapes_arg = "tiny,20b", tokens_arg = "1,16,128";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--threads") threads = std::atoi(value().c_str());
    else if (a == "--reps") reps = std::max(1, std::atoi(value().c_str()));
    else if (a == "--isa") isa_name = value();
    else if (a == "--shapes") shapes_arg = value();
    else if (a == "--tokens") tokens_arg = value();
    else if (a == "--no-plain") plain_on = false;
    else if (a == "--plain-max-tokens") plain_max_tokens = std::max(1, std::atoi(value().c_str()));
    else {
      std::fprintf(stderr,
                   "usage: %s [--threads N] [--reps N] [--isa avx512|avx2|scalar] "
                   "[--shapes tiny,20b] [--tokens 1,16,128] [--plain-max-tokens N] [--no-plain]\n",
                   argv[0]);
      return 2;
    }
  }
  internal::MoeIsa isa = internal::BestMoeIsa();
  if (!isa_name.empty()) {
    bool found = false;
    for (auto c : {internal::MoeIsa::kScalar, internal::MoeIsa::kAvx2, internal::MoeIsa::kAvx512}) {
      if (isa_name == internal::MoeIsaName(c)) isa = c, found = true;
    }
    if (!found || !internal::MoeIsaAvailable(isa)) {
      std::fprintf(stderr, "--isa %s: not available here\n", isa_name.c_str());
      return 2;
    }
  }
  ThreadPool pool(threads);
  std::printf("fast path: %s, threads: %d, reps: %d (median)\n\n", internal::MoeIsaName(isa),
              threads, reps);
  std::printf("| shape | tokens | plain ms | fast ms | fast GFLOP/s | speedup | weights MB | GB/s | fast CPU ms / thread |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (const std::string& sn : Split(shapes_arg)) {
    Shape s;
    if (sn == "tiny") s = {"tiny (H=I=64, E=8, k=4)", 64, 64, 8, 4};
    else if (sn == "20b") s = {"gpt-oss-20b layer (H=I=2880, E=32, k=4)", 2880, 2880, 32, 4};
    else if (sn == "hot") s = {"one 2880x2880 expert, L3-resident (E=1, k=1)", 2880, 2880, 1, 1};
    else if (sn == "120b") s = {"gpt-oss-120b layer (H=I=2880, E=128, k=4)", 2880, 2880, 128, 4};
    else {
      std::fprintf(stderr, "unknown shape %s\n", sn.c_str());
      return 2;
    }
    Layer layer(s);
    for (const std::string& ts : Split(tokens_arg)) {
      const int T = std::atoi(ts.c_str());
      std::vector<float> out(static_cast<size_t>(T) * s.H);
      // fast: one warm-up, then reps with fresh routing each time
      std::vector<double> fast_ms, fast_cpu_ms;
      double mb = 0;
      for (int r = -1; r < reps; ++r) {
        Batch b(s, T, 1000 + r);
        const double c0 = CpuMs(), t0 = NowMs();
        absl::Status st = internal::MoeForwardFastIsa(layer.layer, b.batch, out.data(), &pool, isa);
        const double t1 = NowMs(), c1 = CpuMs();
        if (!st.ok()) {
          std::fprintf(stderr, "fast: %s\n", std::string(st.message()).c_str());
          return 1;
        }
        if (r >= 0) {
          fast_ms.push_back(t1 - t0);
          fast_cpu_ms.push_back((c1 - c0) / threads);
          mb += static_cast<double>(b.distinct) * layer.bytes_per_expert / 1e6 / reps;
        }
      }
      // plain: on at most plain_max_tokens tokens, scaled linearly
      // The plain kernel runs at ~1 GFLOP/s: whole batches up to ~2 GFLOP, else a slice.
      const double plain_flop = 2.0 * s.k * T * 3.0 * s.H * s.I;
      const int Tp = plain_flop <= 2e9 ? T : std::min(T, plain_max_tokens);
      const int plain_reps = Tp * static_cast<int64_t>(s.H) * s.I > 50'000'000 ? 1 : reps;
      std::vector<double> plain_ms;
      std::vector<float> pout(static_cast<size_t>(Tp) * s.H);
      for (int r = 0; r < (plain_on ? plain_reps : 1); ++r) {
        if (!plain_on) {
          plain_ms.push_back(0.0);
          break;
        }
        Batch b(s, Tp, 2000 + r);
        const double t0 = NowMs();
        absl::Status st = MoeForwardReference(layer.layer, b.batch, pout.data());
        plain_ms.push_back(NowMs() - t0);
        if (!st.ok()) return 1;
      }
      const double plain = Median(plain_ms) * T / Tp;
      const double fast = Median(fast_ms);
      const double flop = 2.0 * s.k * T * 3.0 * s.H * s.I;
      char plain_s[32] = "-", speedup_s[32] = "-";
      if (plain_on) {
        std::snprintf(plain_s, sizeof plain_s, "%s%.3f", Tp < T ? "~" : "", plain);
        std::snprintf(speedup_s, sizeof speedup_s, "%.1fx", plain / fast);
      }
      std::printf("| %s | %d | %s | %.3f | %.1f | %s | %.1f | %.1f | %.3f |\n", s.name.c_str(),
                  T, plain_s, fast, flop / fast / 1e6, speedup_s, mb, mb / fast,
                  Median(fast_cpu_ms));
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace
}  // namespace mxserve::kernels

int main(int argc, char** argv) { return mxserve::kernels::Main(argc, argv); }
