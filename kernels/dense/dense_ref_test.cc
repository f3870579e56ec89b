// The dense twins (dense_ref.h) on hand-computed cases and against the model's own RoPE
// (coordinator/models/rope.cc): the GPU check trusts these loops as its reference.
#include "kernels/dense/dense_ref.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/bf16.h"
#include "core/model_config.h"
#include "coordinator/models/rope.h"

namespace mxserve::kernels::dense_ref {
namespace {

std::vector<uint16_t> Bf16(const std::vector<float>& v) {
  std::vector<uint16_t> out;
  for (float x : v) out.push_back(FloatToBf16(x));
  return out;
}

TEST(DenseRefTest, EmbedRowsWidensTheChosenRows) {
  const auto table = Bf16({1, 2, 3, -4, 0.5f, 6});  // 3 rows of 2
  const std::vector<int32_t> ids = {2, 0, 2};
  std::vector<float> out(6);
  EmbedRows(table.data(), ids.data(), 3, 2, out.data());
  EXPECT_EQ(out, (std::vector<float>{0.5f, 6, 1, 2, 0.5f, 6}));
}

TEST(DenseRefTest, RmsNormGathersRowsAndRoundsBf16) {
  const std::vector<float> x = {3, 4, 1, 1};  // rows [3, 4], [1, 1]
  const std::vector<float> w = {1, 2};
  const std::vector<int32_t> rows = {1, 0};
  std::vector<float> y(4);
  std::vector<uint16_t> y16(4);
  RmsNorm(x.data(), rows.data(), 2, 2, w.data(), 0.0f, y.data(), y16.data());
  EXPECT_FLOAT_EQ(y[0], 1.0f);  // [1, 1]: mean square 1
  EXPECT_FLOAT_EQ(y[1], 2.0f);
  EXPECT_FLOAT_EQ(y[2], 3.0f / std::sqrt(12.5f));
  EXPECT_FLOAT_EQ(y[3], 8.0f / std::sqrt(12.5f));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(y16[i], FloatToBf16(y[i]));
  std::vector<float> y2(2, -1.0f);  // eps enters under the root; out16 may be null
  RmsNorm(x.data(), nullptr, 1, 2, w.data(), 3.5f, y2.data(), nullptr);
  EXPECT_FLOAT_EQ(y2[0], 3.0f / 4.0f);  // sqrt(12.5 + 3.5) = 4
}

TEST(DenseRefTest, ResidualAndBias) {
  std::vector<float> h = {1, 2, 3, 4};
  const std::vector<float> a = {10, 20, 30, 40}, b = {100, 200};
  AddResidual(h.data(), a.data(), b.data(), 2, 2);
  EXPECT_EQ(h, (std::vector<float>{111, 222, 133, 244}));
  AddResidual(h.data(), a.data(), nullptr, 2, 2);
  EXPECT_EQ(h, (std::vector<float>{121, 242, 163, 284}));
  AddBias(h.data(), b.data(), 2, 2);
  EXPECT_EQ(h, (std::vector<float>{221, 442, 263, 484}));
}

// A layout of one sequence with block_size 2 and blocks {3, 0, 2}: positions 0..5.
struct OneSeq {
  std::vector<int32_t> positions, seqs, table = {3, 0, 2};
  TokenLayout tl;
  explicit OneSeq(std::vector<int32_t> pos) : positions(std::move(pos)), seqs(positions.size(), 0) {
    tl = {static_cast<int>(positions.size()), positions.data(), seqs.data(), table.data(), 3, 2};
  }
};

TEST(DenseRefTest, QkvRopeStoreMatchesTheModelsRope) {
  ModelConfig c;
  c.head_dim = 8;
  c.rope_theta = 150000;
  c.rope_scaling.factor = 32;
  c.rope_scaling.original_max_position_embeddings = 4096;
  c.rope_scaling.truncate = false;
  auto rp = ComputeRopeParams(c);
  ASSERT_TRUE(rp.ok()) << rp.status();
  const int d = 8, nq = 2, nkv = 1, width = (nq + 2 * nkv) * d;
  OneSeq s({3, 5});
  std::vector<float> qkv(2 * width), bias(width);
  for (int i = 0; i < 2 * width; ++i) qkv[i] = std::sin(0.7f * i) * 3;
  for (int i = 0; i < width; ++i) bias[i] = 0.25f * (i % 5) - 0.5f;
  std::vector<uint16_t> k(6 * 2 * d, 0), v(6 * 2 * d, 0);  // 6 blocks of 2 rows
  KvLayer kv{k.data(), v.data(), nkv, d};
  std::vector<float> q(2 * nq * d);
  QkvRopeStore(qkv.data(), bias.data(), nq, Rope{rp->inv_freq.data(), rp->concentration}, s.tl,
               kv, q.data());
  for (int t = 0; t < 2; ++t) {
    std::vector<float> row(width), cs(d / 2), sn(d / 2);
    for (int i = 0; i < width; ++i) row[i] = qkv[t * width + i] + bias[i];
    RopeCosSin(*rp, s.positions[t], cs.data(), sn.data());
    for (int hd = 0; hd < nq + nkv; ++hd) ApplyRope(cs.data(), sn.data(), d, &row[hd * d]);
    for (int i = 0; i < nq * d; ++i) EXPECT_FLOAT_EQ(q[t * nq * d + i], row[i]) << t << " " << i;
    // position 3: block table[1] = 0, row 1; position 5: table[2] = 2, row 1.
    const int cache_row = t == 0 ? 0 * 2 + 1 : 2 * 2 + 1;
    for (int e = 0; e < d; ++e) {
      EXPECT_EQ(k[cache_row * d + e], FloatToBf16(row[nq * d + e]));
      EXPECT_EQ(v[cache_row * d + e], FloatToBf16(row[(nq + nkv) * d + e]));
    }
  }
}

// Keys/values of positions 0..5 of OneSeq's sequence, one kv head of dim 2, bf16-exact values.
struct TinyCache {
  std::vector<uint16_t> k = std::vector<uint16_t>(6 * 2 * 2), v = k;
  std::vector<float> kf = {1, 0, 0, 1, 1, 1, -1, 0.5f, 0.5f, 2, 0, -1};    // [pos][2]
  std::vector<float> vf = {1, 2, -1, 4, 0.5f, 0, 3, -2, 1.5f, 1, -0.25f, 8};
  TinyCache() {
    const int table[3] = {3, 0, 2};
    for (int p = 0; p < 6; ++p) {
      const int row = table[p / 2] * 2 + p % 2;
      for (int e = 0; e < 2; ++e) {
        k[row * 2 + e] = FloatToBf16(kf[p * 2 + e]);
        v[row * 2 + e] = FloatToBf16(vf[p * 2 + e]);
      }
    }
  }
};

// softmax over {scale * q.k_j : j in [lo, pos]} and the sink (when given), applied to v.
std::vector<float> Direct(const TinyCache& c, const float* q, int pos, int lo, const float* sink,
                          float scale) {
  double mx = sink != nullptr ? *sink : -INFINITY;
  std::vector<double> s;
  for (int j = lo; j <= pos; ++j) {
    s.push_back(scale * (q[0] * c.kf[j * 2] + q[1] * c.kf[j * 2 + 1]));
    mx = std::max(mx, s.back());
  }
  double denom = sink != nullptr ? std::exp(*sink - mx) : 0, o0 = 0, o1 = 0;
  for (int j = lo; j <= pos; ++j) {
    const double e = std::exp(s[j - lo] - mx);
    denom += e;
    o0 += e * c.vf[j * 2];
    o1 += e * c.vf[j * 2 + 1];
  }
  return {static_cast<float>(o0 / denom), static_cast<float>(o1 / denom)};
}

void ExpectBf16Near(uint16_t got, float want) {
  EXPECT_NEAR(Bf16ToFloat(got), want, std::abs(want) * (1.0f / 256) + 1e-6f);
}

TEST(DenseRefTest, AttentionIsASoftmaxOverScoresAndTheSink) {
  TinyCache c;
  OneSeq s({4, 5});
  const std::vector<float> q = {0.5f, -1.0f, 2.0f, 0.25f};  // two tokens, one head
  const float sink = 0.75f, scale = 0.7f;
  std::vector<uint16_t> out(4);
  KvLayer kv{c.k.data(), c.v.data(), 1, 2};
  for (const float* sk : {static_cast<const float*>(nullptr), &sink}) {
    PagedAttention(q.data(), 1, s.tl, kv, sk, 0, scale, out.data());
    for (int t = 0; t < 2; ++t) {
      const std::vector<float> want = Direct(c, &q[t * 2], s.positions[t], 0, sk, scale);
      ExpectBf16Near(out[t * 2], want[0]);
      ExpectBf16Near(out[t * 2 + 1], want[1]);
    }
  }
}

TEST(DenseRefTest, SlidingWindowExcludesOlderKeys) {
  TinyCache c;
  OneSeq s({5});
  const std::vector<float> q = {1.0f, 0.5f};
  const float sink = -0.5f;
  std::vector<uint16_t> out(2), out2(2);
  KvLayer kv{c.k.data(), c.v.data(), 1, 2};
  PagedAttention(q.data(), 1, s.tl, kv, &sink, 2, 1.0f, out.data());  // positions 4 and 5
  const std::vector<float> want = Direct(c, q.data(), 5, 4, &sink, 1.0f);
  ExpectBf16Near(out[0], want[0]);
  ExpectBf16Near(out[1], want[1]);
  for (int i = 0; i < 2 * 2; ++i) c.v[i] = FloatToBf16(100.0f);  // block 0: positions 2, 3
  PagedAttention(q.data(), 1, s.tl, kv, &sink, 2, 1.0f, out2.data());
  EXPECT_EQ(out, out2);
  PagedAttention(q.data(), 1, s.tl, kv, &sink, 0, 1.0f, out2.data());  // whole context sees them
  EXPECT_NE(out, out2);
}

TEST(DenseRefTest, QueryHeadsShareTheirGroupsKvHead) {
  // Two kv heads of dim 2 at positions 0..1 (block 0 of block_size 2); four query heads.
  const std::vector<int32_t> pos = {1}, seq = {0}, table = {0};
  TokenLayout tl{1, pos.data(), seq.data(), table.data(), 1, 2};
  // [row][kv head][e]
  const auto k = Bf16({1, 0, 0, 1, 0, 1, 1, 0});
  const auto v = Bf16({1, 1, 10, 10, 3, 3, 20, 20});
  KvLayer kv{const_cast<uint16_t*>(k.data()), const_cast<uint16_t*>(v.data()), 2, 2};
  const std::vector<float> q = {2, 0, 2, 0, 2, 0, 2, 0};  // every head the same query
  std::vector<uint16_t> out(8);
  PagedAttention(q.data(), 4, tl, kv, nullptr, 0, 1.0f, out.data());
  // heads 0, 1 read kv head 0: scores {2, 0}; heads 2, 3 read kv head 1: scores {0, 2}.
  const float w = 1.0f / (1.0f + std::exp(-2.0f));
  for (int h = 0; h < 4; ++h) {
    const float want = h < 2 ? w * 1 + (1 - w) * 3 : (1 - w) * 10 + w * 20;
    ExpectBf16Near(out[h * 2], want);
    ExpectBf16Near(out[h * 2 + 1], want);
  }
}

TEST(DenseRefTest, RouterTopKBreaksTiesByLowerIdAndSoftmaxesTheChosen) {
  const std::vector<float> z = {1, 3, 3, 2, 3, /*token 1*/ 0, -1, 2, 2, 0.5f};
  std::vector<int32_t> ids(6);
  std::vector<float> w(6);
  RouterTopK(z.data(), 2, 5, 3, ids.data(), w.data());
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 2, 4, 2, 3, 4}));
  for (int k = 0; k < 3; ++k) EXPECT_FLOAT_EQ(w[k], 1.0f / 3);
  const float e = std::exp(-1.5f);
  EXPECT_FLOAT_EQ(w[3], 1 / (2 + e));
  EXPECT_FLOAT_EQ(w[4], 1 / (2 + e));
  EXPECT_FLOAT_EQ(w[5], e / (2 + e));
}

}  // namespace
}  // namespace mxserve::kernels::dense_ref
