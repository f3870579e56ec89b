#include "kernels/dense/dense_ref.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <numeric>
#include <vector>

#include "core/bf16.h"

namespace mxserve::kernels::dense_ref {
namespace {

// Index of position `pos` of the token's sequence in K or V (elements), head `kvh`.
size_t CacheIndex(const TokenLayout& tl, const KvLayer& kv, int seq, int pos, int kvh) {
  const int block = tl.block_tables[static_cast<size_t>(seq) * tl.max_blocks + pos / tl.block_size];
  const size_t row = static_cast<size_t>(block) * tl.block_size + pos % tl.block_size;
  return (row * kv.num_kv_heads + kvh) * kv.head_dim;
}

}  // namespace

void EmbedRows(const bf16_bits* table, const int32_t* ids, int num_tokens, int hidden, float* out) {
  for (int t = 0; t < num_tokens; ++t) {
    for (int i = 0; i < hidden; ++i) {
      out[static_cast<size_t>(t) * hidden + i] =
          Bf16ToFloat(table[static_cast<size_t>(ids[t]) * hidden + i]);
    }
  }
}

void RmsNorm(const float* x, const int32_t* rows, int num_rows, int hidden, const float* w,
             float eps, float* out32, bf16_bits* out16) {
  for (int r = 0; r < num_rows; ++r) {
    const float* xr = x + static_cast<size_t>(rows != nullptr ? rows[r] : r) * hidden;
    double ss = 0;
    for (int i = 0; i < hidden; ++i) ss += static_cast<double>(xr[i]) * xr[i];
    const float var = static_cast<float>(ss / hidden);
    const float inv = static_cast<float>(1.0 / std::sqrt(static_cast<double>(var + eps)));
    for (int i = 0; i < hidden; ++i) {
      const float y = w[i] * (xr[i] * inv);
      if (out32 != nullptr) out32[static_cast<size_t>(r) * hidden + i] = y;
      if (out16 != nullptr) out16[static_cast<size_t>(r) * hidden + i] = FloatToBf16(y);
    }
  }
}

void AddResidual(float* h, const float* a, const float* bias, int num_tokens, int n) {
  for (int t = 0; t < num_tokens; ++t) {
    for (int j = 0; j < n; ++j) {
      const size_t i = static_cast<size_t>(t) * n + j;
      h[i] = h[i] + (bias != nullptr ? a[i] + bias[j] : a[i]);
    }
  }
}

void AddBias(float* x, const float* bias, int num_tokens, int n) {
  for (int t = 0; t < num_tokens; ++t) {
    for (int j = 0; j < n; ++j) x[static_cast<size_t>(t) * n + j] += bias[j];
  }
}

void QkvRopeStore(const float* qkv, const float* bias, int num_q_heads, Rope rope,
                  const TokenLayout& tokens, KvLayer kv, float* q_out) {
  const int d = kv.head_dim, half = d / 2, nq = num_q_heads, nkv = kv.num_kv_heads;
  const int width = (nq + 2 * nkv) * d;
  std::vector<float> row(width), cs(half), sn(half);
  for (int t = 0; t < tokens.num_tokens; ++t) {
    for (int i = 0; i < width; ++i) {
      row[i] = qkv[static_cast<size_t>(t) * width + i] + (bias != nullptr ? bias[i] : 0.0f);
    }
    const int pos = tokens.positions[t];
    for (int i = 0; i < half; ++i) {
      const float f = static_cast<float>(pos) * rope.inv_freq[i];
      cs[i] = static_cast<float>(std::cos(static_cast<double>(f))) * rope.concentration;
      sn[i] = static_cast<float>(std::sin(static_cast<double>(f))) * rope.concentration;
    }
    for (int hd = 0; hd < nq + nkv; ++hd) {
      float* x = &row[hd * d];
      for (int i = 0; i < half; ++i) {
        const float a = x[i], b = x[i + half];
        x[i] = a * cs[i] - b * sn[i];
        x[i + half] = b * cs[i] + a * sn[i];
      }
    }
    std::copy(row.begin(), row.begin() + nq * d, q_out + static_cast<size_t>(t) * nq * d);
    for (int h = 0; h < nkv; ++h) {
      const size_t at = CacheIndex(tokens, kv, tokens.token_seq[t], pos, h);
      for (int e = 0; e < d; ++e) {
        kv.k[at + e] = FloatToBf16(row[(nq + h) * d + e]);
        kv.v[at + e] = FloatToBf16(row[(nq + nkv + h) * d + e]);
      }
    }
  }
}

void PagedAttention(const float* q, int num_q_heads, const TokenLayout& tokens, KvLayer kv,
                    const float* sinks, int window, float scale, bf16_bits* out) {
  const int d = kv.head_dim, nq = num_q_heads, group = nq / kv.num_kv_heads;
  std::vector<float> s, acc(d);
  for (int t = 0; t < tokens.num_tokens; ++t) {
    const int pos = tokens.positions[t], seq = tokens.token_seq[t];
    const int lo = window > 0 ? std::max(0, pos - window + 1) : 0;
    s.assign(pos - lo + 1, 0.0f);
    for (int h = 0; h < nq; ++h) {
      const float* qh = q + (static_cast<size_t>(t) * nq + h) * d;
      float mx = sinks != nullptr ? sinks[h] : -std::numeric_limits<float>::infinity();
      for (int j = lo; j <= pos; ++j) {
        const bf16_bits* k = kv.k + CacheIndex(tokens, kv, seq, j, h / group);
        float dot = 0;
        for (int e = 0; e < d; ++e) dot += qh[e] * Bf16ToFloat(k[e]);
        s[j - lo] = dot * scale;
        mx = std::max(mx, s[j - lo]);
      }
      float denom = sinks != nullptr ? std::exp(sinks[h] - mx) : 0.0f;
      for (float& x : s) {
        x = std::exp(x - mx);
        denom += x;
      }
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int j = lo; j <= pos; ++j) {
        const bf16_bits* v = kv.v + CacheIndex(tokens, kv, seq, j, h / group);
        for (int e = 0; e < d; ++e) acc[e] += s[j - lo] * Bf16ToFloat(v[e]);
      }
      const float inv = 1.0f / denom;
      for (int e = 0; e < d; ++e) {
        out[(static_cast<size_t>(t) * nq + h) * d + e] = FloatToBf16(acc[e] * inv);
      }
    }
  }
}

void RouterTopK(const float* logits, int num_tokens, int num_experts, int top_k, int32_t* ids,
                float* weights) {
  std::vector<int> order(num_experts);
  for (int t = 0; t < num_tokens; ++t) {
    const float* z = logits + static_cast<size_t>(t) * num_experts;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + top_k, order.end(),
                      [z](int a, int b) { return z[a] > z[b] || (z[a] == z[b] && a < b); });
    const float zmax = z[order[0]];
    float sum = 0;
    float* w = weights + static_cast<size_t>(t) * top_k;
    for (int k = 0; k < top_k; ++k) {
      ids[static_cast<size_t>(t) * top_k + k] = order[k];
      w[k] = std::exp(z[order[k]] - zmax);
      sum += w[k];
    }
    for (int k = 0; k < top_k; ++k) w[k] /= sum;
  }
}

}  // namespace mxserve::kernels::dense_ref
