// Random MoE layers and batches for the GPU correctness program and benchmark: checkpoint-layout
// MXFP4 bytes (scale bytes 118..127 by default, as kernels/moe/moe_test.cc), biases, activations, routing.
// Filled by several threads with a counter-based generator, so gigabytes take seconds.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "kernels/moe/moe.h"

namespace mxserve::gpu_test {

inline uint64_t Mix(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

template <typename Fn>
void ParallelFor(size_t n, Fn fn) {
  const unsigned nt = std::max(1u, std::min(32u, std::thread::hardware_concurrency()));
  std::vector<std::thread> th;
  for (unsigned i = 0; i < nt; ++i) {
    th.emplace_back([&, i] {
      for (size_t j = i; j < n; j += nt) fn(j);
    });
  }
  for (auto& t : th) t.join();
}

struct HostLayer {
  int hidden = 0, intermediate = 0, num_experts = 0;
  std::vector<uint8_t> gu_q, gu_s, dn_q, dn_s;  // [E][...] contiguous per expert
  std::vector<float> gu_b, dn_b;
  std::vector<kernels::ExpertWeights> w;
  kernels::MoeLayer layer;
};

// held[e] false: expert absent (nullptr in layer.experts).
// Scale bytes are drawn from [scale_lo, scale_lo + scale_span).
inline std::unique_ptr<HostLayer> MakeLayer(int H, int I, int E, bool bias, uint64_t seed,
                                            const std::vector<bool>& held = {}, int scale_lo = 118,
                                            int scale_span = 10) {
  auto L = std::make_unique<HostLayer>();
  L->hidden = H;
  L->intermediate = I;
  L->num_experts = E;
  const size_t guq = size_t(2 * I) * H / 2, gus = size_t(2 * I) * H / 32;
  const size_t dnq = size_t(H) * I / 2, dns = size_t(H) * I / 32;
  L->gu_q.resize(guq * E);
  L->gu_s.resize(gus * E);
  L->dn_q.resize(dnq * E);
  L->dn_s.resize(dns * E);
  auto fill_bytes = [&](std::vector<uint8_t>& v, uint64_t salt, bool scale) {
    const size_t words = (v.size() + 7) / 8;
    const size_t per = 1 << 16;
    ParallelFor((words + per - 1) / per, [&](size_t c) {
      for (size_t i = c * per; i < std::min(words, (c + 1) * per); ++i) {
        uint64_t r = Mix(seed * 0x1000193 + salt * 0x100000001B3ull + i);
        for (int b = 0; b < 8 && i * 8 + b < v.size(); ++b) {
          const uint8_t byte = uint8_t(r >> (8 * b));
          v[i * 8 + b] = scale ? uint8_t(scale_lo + byte % scale_span) : byte;
        }
      }
    });
  };
  fill_bytes(L->gu_q, 1, false);
  fill_bytes(L->gu_s, 2, true);
  fill_bytes(L->dn_q, 3, false);
  fill_bytes(L->dn_s, 4, true);
  if (bias) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    L->gu_b.resize(size_t(E) * 2 * I);
    L->dn_b.resize(size_t(E) * H);
    for (float& f : L->gu_b) f = u(rng);
    for (float& f : L->dn_b) f = u(rng);
  }
  L->w.resize(E);
  L->layer.hidden = H;
  L->layer.intermediate = I;
  L->layer.experts.assign(E, nullptr);
  for (int e = 0; e < E; ++e) {
    kernels::ExpertWeights& w = L->w[e];
    w.gate_up = {L->gu_q.data() + e * guq, L->gu_s.data() + e * gus, 2 * I, H};
    w.down = {L->dn_q.data() + e * dnq, L->dn_s.data() + e * dns, H, I};
    if (bias) {
      w.gate_up_bias = L->gu_b.data() + size_t(e) * 2 * I;
      w.down_bias = L->dn_b.data() + size_t(e) * H;
    }
    if (held.empty() || held[e]) L->layer.experts[e] = &w;
  }
  return L;
}

struct HostBatch {
  int tokens = 0, k = 0;
  std::vector<float> x, w;
  std::vector<int32_t> ids;
  kernels::MoeBatch batch() const { return {tokens, k, x.data(), ids.data(), w.data()}; }
};

// Each token picks k distinct experts among `pool` (a subset, so some experts get no token);
// a slot is -1 with probability skip.
inline HostBatch MakeBatch(int T, int k, int H, const std::vector<int>& pool, double skip,
                           uint64_t seed) {
  HostBatch b;
  b.tokens = T;
  b.k = k;
  b.x.resize(size_t(T) * H);
  b.ids.resize(size_t(T) * k);
  b.w.resize(size_t(T) * k);
  ParallelFor((size_t(T) + 255) / 256, [&](size_t c) {
    std::mt19937_64 rng(Mix(seed + c));
    std::normal_distribution<float> n01(0.f, 1.f);
    std::uniform_real_distribution<float> u01(0.f, 1.f);
    std::vector<int> p = pool;
    for (size_t t = c * 256; t < std::min<size_t>(T, (c + 1) * 256); ++t) {
      for (int h = 0; h < H; ++h) b.x[t * H + h] = n01(rng);
      for (int j = 0; j < k; ++j) {
        const size_t r = j + rng() % (p.size() - j);
        std::swap(p[j], p[r]);
        b.ids[t * k + j] = u01(rng) < skip ? -1 : p[j];
        b.w[t * k + j] = u01(rng);
      }
    }
  });
  return b;
}

}  // namespace mxserve::gpu_test
