#include "coordinator/models/gpt_oss.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>

#include "absl/strings/str_cat.h"
#include "coordinator/models/dense_ops.h"
#include "core/bf16.h"
#include "core/status.h"

namespace mxserve {
namespace {

std::string LayerName(int l, const char* rest) { return absl::StrCat("model.layers.", l, ".", rest); }

}  // namespace

absl::Status CheckGptOssConfig(const ModelConfig& c) {
  auto bad = [](const std::string& field, auto value, const char* why) {
    return absl::InvalidArgumentError(absl::StrCat("config field '", field, "' = ", value, ": ", why));
  };
  if (c.model_type != "gpt_oss") return bad("model_type", c.model_type, "is not gpt_oss");
  if (c.num_hidden_layers <= 0) return bad("num_hidden_layers", c.num_hidden_layers, "must be > 0");
  if (c.hidden_size <= 0) return bad("hidden_size", c.hidden_size, "must be > 0");
  if (c.num_attention_heads <= 0) return bad("num_attention_heads", c.num_attention_heads, "must be > 0");
  if (c.num_key_value_heads <= 0 || c.num_attention_heads % c.num_key_value_heads != 0) {
    return bad("num_key_value_heads", c.num_key_value_heads, "must divide num_attention_heads");
  }
  if (c.head_dim <= 0 || c.head_dim % 2 != 0) return bad("head_dim", c.head_dim, "must be even and > 0");
  if (c.vocab_size <= 0) return bad("vocab_size", c.vocab_size, "must be > 0");
  if (c.num_local_experts <= 0) return bad("num_local_experts", c.num_local_experts, "must be > 0");
  if (c.num_experts_per_tok <= 0 || c.num_experts_per_tok > c.num_local_experts) {
    return bad("num_experts_per_tok", c.num_experts_per_tok, "must be in [1, num_local_experts]");
  }
  if (static_cast<int>(c.layer_types.size()) != c.num_hidden_layers) {
    return bad("layer_types", c.layer_types.size(), "length must equal num_hidden_layers");
  }
  for (size_t l = 0; l < c.layer_types.size(); ++l) {
    const std::string& t = c.layer_types[l];
    if (t != "sliding_attention" && t != "full_attention") {
      return bad(absl::StrCat("layer_types[", l, "]"), t, "must be sliding_attention or full_attention");
    }
    if (t == "sliding_attention" && c.sliding_window <= 0) {
      return bad("sliding_window", c.sliding_window, "must be > 0 with sliding layers");
    }
  }
  if (!(c.rms_norm_eps > 0)) return bad("rms_norm_eps", c.rms_norm_eps, "must be > 0");
  if (c.max_position_embeddings <= 0) {
    return bad("max_position_embeddings", c.max_position_embeddings, "must be > 0");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<GptOssModel>> GptOssModel::Create(const ModelConfig& config,
                                                                  const Checkpoint& checkpoint,
                                                                  MoeExecutor* moe,
                                                                  ThreadPool* pool) {
  if (moe == nullptr) return absl::InvalidArgumentError("gpt-oss needs a MoeExecutor");
  RETURN_IF_ERROR(CheckGptOssConfig(config));
  std::unique_ptr<GptOssModel> m(new GptOssModel());
  m->config_ = config;
  m->moe_ = moe;
  m->pool_ = pool;
  ASSIGN_OR_RETURN(m->rope_, ComputeRopeParams(config));
  RETURN_IF_ERROR(m->Load(checkpoint));
  return m;
}

absl::Status GptOssModel::Load(const Checkpoint& ckpt) {
  const ModelConfig& c = config_;
  const int64_t H = c.hidden_size, V = c.vocab_size, E = c.num_local_experts;
  const int64_t qd = static_cast<int64_t>(c.num_attention_heads) * c.head_dim;
  const int64_t kvd = static_cast<int64_t>(c.num_key_value_heads) * c.head_dim;
  RETURN_IF_ERROR(ReadInto(ckpt, "model.embed_tokens.weight", {V, H}, pool_, embed_));
  RETURN_IF_ERROR(ReadInto(ckpt, "model.norm.weight", {H}, pool_, final_norm_));
  if (!c.tie_word_embeddings) {
    RETURN_IF_ERROR(ReadInto(ckpt, "lm_head.weight", {V, H}, pool_, lm_head_));
  }
  layers_.resize(c.num_hidden_layers);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    Layer& L = layers_[l];
    L.sliding = c.IsSlidingLayer(l);
    RETURN_IF_ERROR(ReadInto(ckpt, LayerName(l, "input_layernorm.weight"), {H}, pool_, L.input_norm));
    RETURN_IF_ERROR(ReadInto(ckpt, LayerName(l, "post_attention_layernorm.weight"), {H}, pool_, L.post_norm));
    RETURN_IF_ERROR(CheckShape(ckpt, LayerName(l, "self_attn.q_proj.weight"), {qd, H}));
    RETURN_IF_ERROR(CheckShape(ckpt, LayerName(l, "self_attn.k_proj.weight"), {kvd, H}));
    RETURN_IF_ERROR(CheckShape(ckpt, LayerName(l, "self_attn.v_proj.weight"), {kvd, H}));
    L.qkv_w.assign(static_cast<size_t>((qd + 2 * kvd) * H), 0.0f);
    L.qkv_b.assign(static_cast<size_t>(qd + 2 * kvd), 0.0f);
    RETURN_IF_ERROR(ReadDense(ckpt, LayerName(l, "self_attn.q_proj.weight"), {qd, H}, pool_, L.qkv_w.data()));
    RETURN_IF_ERROR(ReadDense(ckpt, LayerName(l, "self_attn.k_proj.weight"), {kvd, H}, pool_, L.qkv_w.data() + qd * H));
    RETURN_IF_ERROR(ReadDense(ckpt, LayerName(l, "self_attn.v_proj.weight"), {kvd, H}, pool_, L.qkv_w.data() + (qd + kvd) * H));
    RETURN_IF_ERROR(ReadInto(ckpt, LayerName(l, "self_attn.o_proj.weight"), {H, qd}, pool_, L.o_w));
    L.o_b.assign(static_cast<size_t>(H), 0.0f);
    if (c.attention_bias) {
      RETURN_IF_ERROR(ReadDense(ckpt, LayerName(l, "self_attn.q_proj.bias"), {qd}, pool_, L.qkv_b.data()));
      RETURN_IF_ERROR(ReadDense(ckpt, LayerName(l, "self_attn.k_proj.bias"), {kvd}, pool_, L.qkv_b.data() + qd));
      RETURN_IF_ERROR(ReadDense(ckpt, LayerName(l, "self_attn.v_proj.bias"), {kvd}, pool_, L.qkv_b.data() + qd + kvd));
      RETURN_IF_ERROR(ReadDense(ckpt, LayerName(l, "self_attn.o_proj.bias"), {H}, pool_, L.o_b.data()));
    }
    RETURN_IF_ERROR(ReadInto(ckpt, LayerName(l, "self_attn.sinks"), {c.num_attention_heads}, pool_, L.sinks));
    RETURN_IF_ERROR(ReadInto(ckpt, LayerName(l, "mlp.router.weight"), {E, H}, pool_, L.router_w));
    RETURN_IF_ERROR(ReadInto(ckpt, LayerName(l, "mlp.router.bias"), {E}, pool_, L.router_b));
  }
  return absl::OkStatus();
}

void GptOssModel::ParallelFor(int64_t n, const std::function<void(int64_t)>& fn) const {
  if (pool_ != nullptr && n > 1) {
    pool_->ParallelFor(n, fn);
  } else {
    for (int64_t i = 0; i < n; ++i) fn(i);
  }
}

void GptOssModel::Attend(int l, const ForwardBatch& batch, const std::vector<int64_t>& chunk_begin,
                         const std::vector<int64_t>& tok_pos, const float* qkv,
                         const KvCache& cache, float* attn) const {
  const ModelConfig& c = config_;
  const int nq = c.num_attention_heads, nkv = c.num_key_value_heads, d = c.head_dim;
  const int group = nq / nkv, qd = nq * d, qkvd = qd + 2 * nkv * d;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  const Layer& L = layers_[l];
  const int64_t window = L.sliding ? c.sliding_window : 0;
  // Work items: (chunk, kv head, tile of up to kTile query tokens). Each gathers the keys its
  // tile can see once, transposed, so that scores are axpys over keys (vectorisable without
  // reassociating a dot product) and are shared by the `group` query heads of the kv head.
  constexpr int64_t kTile = 32;
  std::vector<int64_t> item_chunk, item_t0;
  for (size_t i = 0; i < batch.chunks.size(); ++i) {
    for (int64_t t0 = chunk_begin[i]; t0 < chunk_begin[i + 1]; t0 += kTile) {
      item_chunk.push_back(static_cast<int64_t>(i));
      item_t0.push_back(t0);
    }
  }
  const int64_t tiles = static_cast<int64_t>(item_chunk.size());
  ParallelFor(tiles * nkv, [&](int64_t item) {
    const int64_t tile = item / nkv;
    const int kvh = static_cast<int>(item % nkv);
    const int64_t i = item_chunk[tile];
    const SequenceChunk& ch = batch.chunks[i];
    const int64_t t0 = item_t0[tile], t1 = std::min(t0 + kTile, chunk_begin[i + 1]);
    const int64_t lo = window > 0 ? std::max<int64_t>(0, tok_pos[t0] - window + 1) : 0;
    const int64_t hi = tok_pos[t1 - 1];  // inclusive
    const int64_t n = hi - lo + 1;
    std::vector<float> kt(static_cast<size_t>(d) * n), vc(static_cast<size_t>(n) * d), s(n);
    const int bs = cache.block_size();
    for (int64_t j = lo; j <= hi; ++j) {
      const int block = ch.block_table[j / bs], slot = static_cast<int>(j % bs);
      const float* k = cache.K(l, block, slot) + kvh * d;
      for (int e = 0; e < d; ++e) kt[e * n + (j - lo)] = k[e];
      std::memcpy(&vc[(j - lo) * d], cache.V(l, block, slot) + kvh * d, d * sizeof(float));
    }
    std::vector<float> acc(d);
    for (int hq = kvh * group; hq < (kvh + 1) * group; ++hq) {
      const float sink = L.sinks[hq];
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t pos = tok_pos[t];
        const int64_t a = (window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0) - lo;
        const int64_t b = pos - lo + 1;  // keys [a, b) of the gathered range
        const float* q = qkv + t * qkvd + hq * d;
        float* sp = s.data();
        std::fill(sp + a, sp + b, 0.0f);
        for (int e = 0; e < d; ++e) {
          const float qe = q[e];
          const float* kr = &kt[e * n];
          for (int64_t j = a; j < b; ++j) sp[j] += qe * kr[j];
        }
        float mx = sink;
        for (int64_t j = a; j < b; ++j) {
          sp[j] *= scale;
          mx = std::max(mx, sp[j]);
        }
        // softmax over [scores, sink] (HF subtracts the max including the sink); the sink
        // column only adds exp(sink) to the denominator.
        float denom = std::exp(sink - mx);
        for (int64_t j = a; j < b; ++j) {
          sp[j] = std::exp(sp[j] - mx);
          denom += sp[j];
        }
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t j = a; j < b; ++j) {
          const float w = sp[j];
          const float* v = &vc[j * d];
          for (int e = 0; e < d; ++e) acc[e] += w * v[e];
        }
        float* out = attn + t * qd + hq * d;
        const float inv = 1.0f / denom;
        for (int e = 0; e < d; ++e) out[e] = acc[e] * inv;
      }
    }
  });
}

absl::StatusOr<ForwardOutput> GptOssModel::Forward(const ForwardBatch& batch, KvCache& cache) {
  const ModelConfig& c = config_;
  const int H = c.hidden_size, nq = c.num_attention_heads, nkv = c.num_key_value_heads;
  const int d = c.head_dim, E = c.num_local_experts, K = c.num_experts_per_tok;
  const int half = d / 2;
  const int qd = nq * d, kvd = nkv * d, qkvd = qd + 2 * kvd;
  const float eps = static_cast<float>(c.rms_norm_eps);
  if (cache.num_layers() != c.num_hidden_layers || cache.num_kv_heads() != nkv ||
      cache.head_dim() != d) {
    return absl::InvalidArgumentError("KV cache shape does not match the model");
  }

  // Flatten the batch: token t belongs to chunk tok_chunk[t] at position tok_pos[t].
  const int num_chunks = static_cast<int>(batch.chunks.size());
  std::vector<int64_t> chunk_begin(num_chunks + 1, 0);
  for (int i = 0; i < num_chunks; ++i) {
    chunk_begin[i + 1] = chunk_begin[i] + static_cast<int64_t>(batch.chunks[i].tokens.size());
  }
  const int64_t T = chunk_begin[num_chunks];
  std::vector<int64_t> tok_pos(T);
  std::vector<float> h(T * H), y(T * H), tmp(T * H), qkv(T * qkvd), attn(T * qd);
  std::vector<float> rope_cos(T * half), rope_sin(T * half);
  for (int i = 0; i < num_chunks; ++i) {
    const SequenceChunk& ch = batch.chunks[i];
    for (size_t j = 0; j < ch.tokens.size(); ++j) {
      const int64_t t = chunk_begin[i] + static_cast<int64_t>(j);
      tok_pos[t] = ch.start_pos + static_cast<int64_t>(j);
      std::memcpy(&h[t * H], &embed_[static_cast<size_t>(ch.tokens[j]) * H], H * sizeof(float));
      RopeCosSin(rope_, tok_pos[t], &rope_cos[t * half], &rope_sin[t * half]);
    }
  }

  std::vector<float> router_logits(T * E), topk_w(T * K);
  std::vector<int32_t> topk_ids(T * K);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const Layer& L = layers_[l];
    // --- attention ---
    RmsNorm(h.data(), L.input_norm.data(), T, H, eps, y.data());
    Linear(y.data(), L.qkv_w.data(), L.qkv_b.data(), T, qkvd, H, qkv.data());
    for (int i = 0; i < num_chunks; ++i) {
      const SequenceChunk& ch = batch.chunks[i];
      for (int64_t t = chunk_begin[i]; t < chunk_begin[i + 1]; ++t) {
        float* row = &qkv[t * qkvd];
        for (int hd = 0; hd < nq + nkv; ++hd) {
          ApplyRope(&rope_cos[t * half], &rope_sin[t * half], d, row + hd * d);
        }
        std::memcpy(cache.KAt(l, ch.block_table, tok_pos[t]), row + qd, kvd * sizeof(float));
        std::memcpy(cache.VAt(l, ch.block_table, tok_pos[t]), row + qd + kvd, kvd * sizeof(float));
      }
    }
    Attend(l, batch, chunk_begin, tok_pos, qkv.data(), cache, attn.data());
    Linear(attn.data(), L.o_w.data(), L.o_b.data(), T, H, qd, tmp.data());
    for (int64_t i = 0; i < T * H; ++i) h[i] += tmp[i];

    // --- MoE ---
    RmsNorm(h.data(), L.post_norm.data(), T, H, eps, y.data());
    Linear(y.data(), L.router_w.data(), L.router_b.data(), T, E, H, router_logits.data());
    std::vector<int> order(E);
    for (int64_t t = 0; t < T; ++t) {
      const float* z = &router_logits[t * E];
      std::iota(order.begin(), order.end(), 0);
      // top-k sorted descending; equal logits keep the lower expert id first.
      std::partial_sort(order.begin(), order.begin() + K, order.end(),
                        [z](int a, int b) { return z[a] > z[b] || (z[a] == z[b] && a < b); });
      const float zmax = z[order[0]];
      float sum = 0;
      for (int k = 0; k < K; ++k) {
        topk_ids[t * K + k] = order[k];
        topk_w[t * K + k] = std::exp(z[order[k]] - zmax);
        sum += topk_w[t * K + k];
      }
      for (int k = 0; k < K; ++k) topk_w[t * K + k] /= sum;
    }
    if (T > 0) {
      ExpertBatch batch;
      batch.layer = l;
      batch.hidden = H;
      batch.num_tokens = static_cast<int>(T);
      batch.top_k = K;
      batch.x = y.data();
      batch.expert_ids = topk_ids.data();
      batch.weights = topk_w.data();
      RETURN_IF_ERROR(moe_->Run(batch, tmp.data()));
    }
    for (int64_t i = 0; i < T * H; ++i) h[i] += tmp[i];
  }

  // --- final norm + lm_head on the rows asked for ---
  ForwardOutput out;
  out.vocab_size = c.vocab_size;
  out.row_offset.resize(num_chunks);
  std::vector<int64_t> rows;
  for (int i = 0; i < num_chunks; ++i) {
    out.row_offset[i] = static_cast<int>(rows.size());
    if (batch.chunks[i].all_logits) {
      for (int64_t t = chunk_begin[i]; t < chunk_begin[i + 1]; ++t) rows.push_back(t);
    } else if (chunk_begin[i + 1] > chunk_begin[i]) {
      rows.push_back(chunk_begin[i + 1] - 1);
    }
  }
  const int64_t R = static_cast<int64_t>(rows.size());
  std::vector<float> sel(R * H), normed(R * H);
  for (int64_t r = 0; r < R; ++r) {
    std::memcpy(&sel[r * H], &h[rows[r] * H], H * sizeof(float));
  }
  RmsNorm(sel.data(), final_norm_.data(), R, H, eps, normed.data());
  out.logits.resize(static_cast<size_t>(R) * c.vocab_size);
  const std::vector<float>& unembed = c.tie_word_embeddings ? embed_ : lm_head_;
  Linear(normed.data(), unembed.data(), nullptr, R, c.vocab_size, H, out.logits.data());
  return out;
}

}  // namespace mxserve
