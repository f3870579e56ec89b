#include "coordinator/models/deepseek_v3.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "coordinator/models/dense_ops.h"
#include "core/status.h"

namespace mxserve {
namespace {

// HF DeepseekV3RMSNorm's default: q_a_layernorm and kv_a_layernorm are built without the
// config's rms_norm_eps.
constexpr float kLatentNormEps = 1e-6f;

std::string LayerName(int l, const char* rest) { return absl::StrCat("model.layers.", l, ".", rest); }

float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// out[T, I] = silu(gu[:, :I]) * gu[:, I:] for rows of gu [T, 2I] (gate half, then up half).
void SiluMulRows(const float* gu, int64_t T, int I, float* out) {
  for (int64_t t = 0; t < T; ++t) {
    const float* g = gu + t * 2 * I;
    for (int i = 0; i < I; ++i) out[t * I + i] = g[i] * Sigmoid(g[i]) * g[I + i];
  }
}

// y[T, H] = down(silu(gate x) * up x) with gate_up [2I, H] and down [H, I].
void SwiGluMlp(const std::vector<float>& gate_up, const std::vector<float>& down, int I,
               const float* x, int64_t T, int H, float* y) {
  std::vector<float> gu(static_cast<size_t>(T) * 2 * I), act(static_cast<size_t>(T) * I);
  Linear(x, gate_up.data(), nullptr, T, 2 * I, H, gu.data());
  SiluMulRows(gu.data(), T, I, act.data());
  Linear(act.data(), down.data(), nullptr, T, H, I, y);
}

// Indices of the k largest of v[0, n) among `allowed` (nullptr: all), descending; equal values
// keep the lower index first.
void TopK(const float* v, int n, int k, const std::vector<char>* allowed, std::vector<int>& out) {
  out.clear();
  for (int i = 0; i < n; ++i) {
    if (allowed == nullptr || (*allowed)[i]) out.push_back(i);
  }
  std::partial_sort(out.begin(), out.begin() + k, out.end(),
                    [v](int a, int b) { return v[a] > v[b] || (v[a] == v[b] && a < b); });
  out.resize(k);
}

}  // namespace

double MlaSoftmaxScale(const ModelConfig& c) {
  double scale = 1.0 / std::sqrt(static_cast<double>(c.qk_nope_head_dim + c.qk_rope_head_dim));
  const RopeScaling& rs = c.rope_scaling;
  if (rs.rope_type != "default" && rs.mscale_all_dim != 0.0) {
    const double m = YarnMscale(rs.factor, rs.mscale_all_dim);
    scale *= m * m;
  }
  return scale;
}

absl::Status CheckDeepseekV3Config(const ModelConfig& c) {
  auto bad = [](const std::string& field, auto value, const char* why) {
    return absl::InvalidArgumentError(absl::StrCat("config field '", field, "' = ", value, ": ", why));
  };
  if (!c.IsDeepseekV3()) return bad("model_type", c.model_type, "is not deepseek_v3 or kimi_k2");
  if (c.num_hidden_layers <= 0) return bad("num_hidden_layers", c.num_hidden_layers, "must be > 0");
  if (c.hidden_size <= 0) return bad("hidden_size", c.hidden_size, "must be > 0");
  if (c.num_attention_heads <= 0) return bad("num_attention_heads", c.num_attention_heads, "must be > 0");
  if (c.kv_lora_rank <= 0) return bad("kv_lora_rank", c.kv_lora_rank, "must be > 0");
  if (c.q_lora_rank < 0) return bad("q_lora_rank", c.q_lora_rank, "must be > 0 or null");
  if (c.qk_nope_head_dim <= 0) return bad("qk_nope_head_dim", c.qk_nope_head_dim, "must be > 0");
  if (c.qk_rope_head_dim <= 0 || c.qk_rope_head_dim % 2 != 0 || c.head_dim != c.qk_rope_head_dim) {
    return bad("qk_rope_head_dim", c.qk_rope_head_dim, "must be even and > 0");
  }
  if (c.v_head_dim <= 0) return bad("v_head_dim", c.v_head_dim, "must be > 0");
  if (c.vocab_size <= 0) return bad("vocab_size", c.vocab_size, "must be > 0");
  if (c.dense_intermediate_size <= 0 && c.first_k_dense_replace > 0) {
    return bad("intermediate_size", c.dense_intermediate_size, "must be > 0 with dense layers");
  }
  if (c.intermediate_size <= 0) return bad("moe_intermediate_size", c.intermediate_size, "must be > 0");
  if (c.num_local_experts <= 0) return bad("n_routed_experts", c.num_local_experts, "must be > 0");
  if (c.n_group <= 0 || c.num_local_experts % c.n_group != 0) {
    return bad("n_group", c.n_group, "must divide n_routed_experts");
  }
  if (c.topk_group <= 0 || c.topk_group > c.n_group) return bad("topk_group", c.topk_group, "must be in [1, n_group]");
  if (c.num_experts_per_tok <= 0 ||
      c.num_experts_per_tok > c.topk_group * (c.num_local_experts / c.n_group)) {
    return bad("num_experts_per_tok", c.num_experts_per_tok, "must be in [1, experts of topk_group groups]");
  }
  if (c.first_k_dense_replace < 0 || c.first_k_dense_replace > c.num_hidden_layers) {
    return bad("first_k_dense_replace", c.first_k_dense_replace, "must be in [0, num_hidden_layers]");
  }
  if (c.n_shared_experts < 0) return bad("n_shared_experts", c.n_shared_experts, "must be >= 0");
  if (!(c.rms_norm_eps > 0)) return bad("rms_norm_eps", c.rms_norm_eps, "must be > 0");
  if (c.max_position_embeddings <= 0) {
    return bad("max_position_embeddings", c.max_position_embeddings, "must be > 0");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<DeepseekV3Model>> DeepseekV3Model::Create(
    const ModelConfig& config, const Checkpoint& checkpoint, MoeExecutor* moe, ThreadPool* pool) {
  if (moe == nullptr) return absl::InvalidArgumentError("DeepSeek-V3 needs a MoeExecutor");
  RETURN_IF_ERROR(CheckDeepseekV3Config(config));
  std::unique_ptr<DeepseekV3Model> m(new DeepseekV3Model());
  m->config_ = config;
  m->moe_ = moe;
  m->pool_ = pool;
  ASSIGN_OR_RETURN(m->rope_, ComputeRopeParams(config));  // head_dim = qk_rope_head_dim
  m->scale_ = static_cast<float>(MlaSoftmaxScale(config));
  RETURN_IF_ERROR(m->Load(checkpoint));
  return m;
}

absl::Status DeepseekV3Model::Load(const Checkpoint& ckpt) {
  const ModelConfig& c = config_;
  const int64_t H = c.hidden_size, V = c.vocab_size;
  RETURN_IF_ERROR(ReadInto(ckpt, "model.embed_tokens.weight", {V, H}, pool_, embed_));
  RETURN_IF_ERROR(ReadInto(ckpt, "model.norm.weight", {H}, pool_, final_norm_));
  if (!c.tie_word_embeddings) {
    RETURN_IF_ERROR(ReadInto(ckpt, "lm_head.weight", {V, H}, pool_, lm_head_));
  }
  layers_.resize(c.num_hidden_layers);
  for (int l = 0; l < c.num_hidden_layers; ++l) RETURN_IF_ERROR(LoadLayer(ckpt, l, layers_[l]));
  return absl::OkStatus();
}

absl::Status DeepseekV3Model::LoadLayer(const Checkpoint& ckpt, int l, Layer& L) {
  const ModelConfig& c = config_;
  const int64_t H = c.hidden_size, nh = c.num_attention_heads, E = c.num_local_experts;
  const int64_t P = c.qk_nope_head_dim, R = c.qk_rope_head_dim, Vd = c.v_head_dim;
  const int64_t Rq = c.q_lora_rank, Rkv = c.kv_lora_rank;
  auto read = [&](const char* name, std::vector<int64_t> shape, std::vector<float>& out) {
    return ReadInto(ckpt, LayerName(l, name), std::move(shape), pool_, out);
  };
  // Two [I, H] matrices stacked into one [2I, H] (one GEMM for both).
  auto read_gate_up = [&](const std::string& prefix, int64_t I, std::vector<float>& out) {
    const std::string g = LayerName(l, (prefix + "gate_proj.weight").c_str());
    const std::string u = LayerName(l, (prefix + "up_proj.weight").c_str());
    RETURN_IF_ERROR(CheckShape(ckpt, g, {I, H}));
    RETURN_IF_ERROR(CheckShape(ckpt, u, {I, H}));
    out.assign(static_cast<size_t>(2 * I * H), 0.0f);
    RETURN_IF_ERROR(ReadDense(ckpt, g, {I, H}, pool_, out.data()));
    return ReadDense(ckpt, u, {I, H}, pool_, out.data() + I * H);
  };
  RETURN_IF_ERROR(read("input_layernorm.weight", {H}, L.input_norm));
  RETURN_IF_ERROR(read("post_attention_layernorm.weight", {H}, L.post_norm));
  if (Rq > 0) {
    RETURN_IF_ERROR(read("self_attn.q_a_proj.weight", {Rq, H}, L.q_a));
    RETURN_IF_ERROR(read("self_attn.q_a_layernorm.weight", {Rq}, L.q_a_norm));
    RETURN_IF_ERROR(read("self_attn.q_b_proj.weight", {nh * (P + R), Rq}, L.q_b));
  } else {
    RETURN_IF_ERROR(read("self_attn.q_proj.weight", {nh * (P + R), H}, L.q));
  }
  RETURN_IF_ERROR(read("self_attn.kv_a_proj_with_mqa.weight", {Rkv + R, H}, L.kv_a));
  RETURN_IF_ERROR(read("self_attn.kv_a_layernorm.weight", {Rkv}, L.kv_a_norm));
  RETURN_IF_ERROR(read("self_attn.kv_b_proj.weight", {nh * (P + Vd), Rkv}, L.kv_b));
  RETURN_IF_ERROR(read("self_attn.o_proj.weight", {H, nh * Vd}, L.o));
  L.moe = c.IsMoeLayer(l);
  if (!L.moe) {
    const int64_t I = c.dense_intermediate_size;
    RETURN_IF_ERROR(read_gate_up("mlp.", I, L.gate_up));
    return read("mlp.down_proj.weight", {H, I}, L.down);
  }
  RETURN_IF_ERROR(read("mlp.gate.weight", {E, H}, L.router));
  RETURN_IF_ERROR(read("mlp.gate.e_score_correction_bias", {E}, L.bias));
  if (c.n_shared_experts > 0) {
    const int64_t I = static_cast<int64_t>(c.intermediate_size) * c.n_shared_experts;
    RETURN_IF_ERROR(read_gate_up("mlp.shared_experts.", I, L.shared_gate_up));
    RETURN_IF_ERROR(read("mlp.shared_experts.down_proj.weight", {H, I}, L.shared_down));
  }
  return absl::OkStatus();
}

void DeepseekV3Model::ParallelFor(int64_t n, const std::function<void(int64_t)>& fn) const {
  if (pool_ != nullptr && n > 1) {
    pool_->ParallelFor(n, fn);
  } else {
    for (int64_t i = 0; i < n; ++i) fn(i);
  }
}

void DeepseekV3Model::Route(const Layer& L, const float* y, int64_t T, int32_t* ids,
                            float* weights) const {
  const ModelConfig& c = config_;
  const int E = c.num_local_experts, K = c.num_experts_per_tok;
  const int G = c.n_group, per_group = E / G;
  std::vector<float> logits(static_cast<size_t>(T) * E), s(E), choice(E), group_score(G);
  Linear(y, L.router.data(), nullptr, T, E, c.hidden_size, logits.data());
  std::vector<char> allowed(E);
  std::vector<int> groups, top, pair;
  for (int64_t t = 0; t < T; ++t) {
    for (int e = 0; e < E; ++e) {
      s[e] = Sigmoid(logits[t * E + e]);
      choice[e] = s[e] + L.bias[e];  // the bias steers the choice only
    }
    const std::vector<char>* mask = nullptr;
    if (G > 1) {
      for (int g = 0; g < G; ++g) {  // a group scores the sum of its two best choices
        TopK(&choice[g * per_group], per_group, 2, nullptr, pair);
        group_score[g] = choice[g * per_group + pair[0]] + choice[g * per_group + pair[1]];
      }
      TopK(group_score.data(), G, c.topk_group, nullptr, groups);
      std::fill(allowed.begin(), allowed.end(), 0);
      for (int g : groups) std::fill(allowed.begin() + g * per_group, allowed.begin() + (g + 1) * per_group, 1);
      mask = &allowed;
    }
    TopK(choice.data(), E, K, mask, top);
    float sum = 0.0f;
    for (int k = 0; k < K; ++k) sum += s[top[k]];
    const float denom = c.norm_topk_prob ? sum + 1e-20f : 1.0f;
    for (int k = 0; k < K; ++k) {
      ids[t * K + k] = top[k];
      weights[t * K + k] = s[top[k]] / denom * static_cast<float>(c.routed_scaling_factor);
    }
  }
}

void DeepseekV3Model::Attend(int l, const ForwardBatch& batch,
                             const std::vector<int64_t>& chunk_begin,
                             const std::vector<int64_t>& tok_pos, const float* q,
                             const KvCache& cache, float* attn) const {
  const ModelConfig& c = config_;
  const int nh = c.num_attention_heads, P = c.qk_nope_head_dim, R = c.qk_rope_head_dim;
  const int Vd = c.v_head_dim, Rkv = c.kv_lora_rank;
  const int qhd = P + R, kvw = P + Vd;
  const Layer& L = layers_[l];
  const int bs = cache.block_size();
  for (size_t i = 0; i < batch.chunks.size(); ++i) {
    const SequenceChunk& ch = batch.chunks[i];
    const int64_t t0 = chunk_begin[i], t1 = chunk_begin[i + 1];
    if (t1 == t0) continue;
    const int64_t n = tok_pos[t1 - 1] + 1;  // keys at positions [0, n)
    std::vector<float> lat(static_cast<size_t>(n) * Rkv), kpe(static_cast<size_t>(n) * R);
    for (int64_t j = 0; j < n; ++j) {
      const float* r = cache.K(l, ch.block_table[j / bs], static_cast<int>(j % bs));
      std::memcpy(&lat[j * Rkv], r, Rkv * sizeof(float));
      std::memcpy(&kpe[j * R], r + Rkv, R * sizeof(float));
    }
    const bool expand = form_ == MlaForm::kExpanded || (form_ == MlaForm::kAuto && t1 - t0 > 1);
    std::vector<float> kv;  // expanded: [n, nh (P + V)] per-head k_nope and v
    if (expand) {
      kv.resize(static_cast<size_t>(n) * nh * kvw);
      Linear(lat.data(), L.kv_b.data(), nullptr, n, nh * kvw, Rkv, kv.data());
    }
    ParallelFor((t1 - t0) * nh, [&](int64_t item) {
      const int64_t t = t0 + item / nh;
      const int hd = static_cast<int>(item % nh);
      const int64_t keys = tok_pos[t] + 1;  // causal
      const float* qn = q + t * nh * qhd + hd * qhd;  // q_nope [P], then q_pe [R]
      const float* qp = qn + P;
      std::vector<float> sc(keys), qt;
      if (!expand) {  // q~ = W_UK^T q_nope in the latent space
        qt.assign(Rkv, 0.0f);
        for (int p = 0; p < P; ++p) {
          const float* wk = &L.kv_b[(static_cast<size_t>(hd) * kvw + p) * Rkv];
          for (int r = 0; r < Rkv; ++r) qt[r] += qn[p] * wk[r];
        }
      }
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < keys; ++j) {
        float a = 0.0f;
        if (expand) {
          const float* kn = &kv[(j * nh + hd) * kvw];
          for (int p = 0; p < P; ++p) a += qn[p] * kn[p];
        } else {
          const float* lj = &lat[j * Rkv];
          for (int r = 0; r < Rkv; ++r) a += qt[r] * lj[r];
        }
        const float* kp = &kpe[j * R];
        for (int r = 0; r < R; ++r) a += qp[r] * kp[r];
        sc[j] = a * scale_;
        mx = std::max(mx, sc[j]);
      }
      float denom = 0.0f;
      for (int64_t j = 0; j < keys; ++j) {
        sc[j] = std::exp(sc[j] - mx);
        denom += sc[j];
      }
      const float inv = 1.0f / denom;
      float* out = attn + t * nh * Vd + hd * Vd;
      if (expand) {
        std::fill(out, out + Vd, 0.0f);
        for (int64_t j = 0; j < keys; ++j) {
          const float* v = &kv[(j * nh + hd) * kvw + P];
          for (int e = 0; e < Vd; ++e) out[e] += sc[j] * v[e];
        }
        for (int e = 0; e < Vd; ++e) out[e] *= inv;
        return;
      }
      std::vector<float> ol(Rkv, 0.0f);  // the weighted latent, then W_UV
      for (int64_t j = 0; j < keys; ++j) {
        const float* lj = &lat[j * Rkv];
        for (int r = 0; r < Rkv; ++r) ol[r] += sc[j] * lj[r];
      }
      for (int e = 0; e < Vd; ++e) {
        const float* wv = &L.kv_b[(static_cast<size_t>(hd) * kvw + P + e) * Rkv];
        float a = 0.0f;
        for (int r = 0; r < Rkv; ++r) a += wv[r] * ol[r];
        out[e] = a * inv;
      }
    });
  }
}

absl::StatusOr<ForwardOutput> DeepseekV3Model::Forward(const ForwardBatch& batch, KvCache& cache) {
  const ModelConfig& c = config_;
  const int H = c.hidden_size, nh = c.num_attention_heads, P = c.qk_nope_head_dim;
  const int R = c.qk_rope_head_dim, Vd = c.v_head_dim, Rkv = c.kv_lora_rank, Rq = c.q_lora_rank;
  const int K = c.num_experts_per_tok, half = R / 2, qhd = P + R, row = Rkv + R;
  const float eps = static_cast<float>(c.rms_norm_eps);
  if (cache.num_layers() != c.num_hidden_layers || cache.planes() != 1 ||
      cache.num_kv_heads() != 1 || cache.head_dim() != row) {
    return absl::InvalidArgumentError("KV cache shape does not match the model (latent rows)");
  }
  const int num_chunks = static_cast<int>(batch.chunks.size());
  std::vector<int64_t> chunk_begin(num_chunks + 1, 0);
  for (int i = 0; i < num_chunks; ++i) {
    chunk_begin[i + 1] = chunk_begin[i] + static_cast<int64_t>(batch.chunks[i].tokens.size());
  }
  const int64_t T = chunk_begin[num_chunks];
  std::vector<int64_t> tok_pos(T);
  std::vector<float> h(T * H), y(T * H), tmp(T * H), shared(T * H), q(T * nh * qhd);
  std::vector<float> cq(T * std::max(Rq, 1)), ckv(T * row), attn(T * nh * Vd);
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
  auto rope = [&](int64_t t, float* x) {
    if (c.rope_interleave) {
      ApplyRopeInterleaved(&rope_cos[t * half], &rope_sin[t * half], R, x);
    } else {
      ApplyRope(&rope_cos[t * half], &rope_sin[t * half], R, x);
    }
  };
  std::vector<float> topk_w(T * K);
  std::vector<int32_t> topk_ids(T * K);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    const Layer& L = layers_[l];
    // --- MLA: queries, the latent and the rope key into the cache, attention ---
    RmsNorm(h.data(), L.input_norm.data(), T, H, eps, y.data());
    if (Rq > 0) {
      Linear(y.data(), L.q_a.data(), nullptr, T, Rq, H, cq.data());
      RmsNorm(cq.data(), L.q_a_norm.data(), T, Rq, kLatentNormEps, cq.data());
      Linear(cq.data(), L.q_b.data(), nullptr, T, nh * qhd, Rq, q.data());
    } else {
      Linear(y.data(), L.q.data(), nullptr, T, nh * qhd, H, q.data());
    }
    Linear(y.data(), L.kv_a.data(), nullptr, T, row, H, ckv.data());
    for (int i = 0; i < num_chunks; ++i) {
      const SequenceChunk& ch = batch.chunks[i];
      for (int64_t t = chunk_begin[i]; t < chunk_begin[i + 1]; ++t) {
        float* r = &ckv[t * row];
        RmsNorm(r, L.kv_a_norm.data(), 1, Rkv, kLatentNormEps, r);
        rope(t, r + Rkv);
        for (int hd = 0; hd < nh; ++hd) rope(t, &q[t * nh * qhd + hd * qhd + P]);
        std::memcpy(cache.KAt(l, ch.block_table, tok_pos[t]), r, row * sizeof(float));
      }
    }
    Attend(l, batch, chunk_begin, tok_pos, q.data(), cache, attn.data());
    Linear(attn.data(), L.o.data(), nullptr, T, H, nh * Vd, tmp.data());
    for (int64_t i = 0; i < T * H; ++i) h[i] += tmp[i];

    // --- MLP: dense, or routed experts (behind moe_) plus shared experts (here) ---
    RmsNorm(h.data(), L.post_norm.data(), T, H, eps, y.data());
    if (!L.moe) {
      SwiGluMlp(L.gate_up, L.down, c.dense_intermediate_size, y.data(), T, H, tmp.data());
      for (int64_t i = 0; i < T * H; ++i) h[i] += tmp[i];
      continue;
    }
    if (T == 0) continue;
    Route(L, y.data(), T, topk_ids.data(), topk_w.data());
    ExpertBatch eb;
    eb.layer = l;
    eb.hidden = H;
    eb.num_tokens = static_cast<int>(T);
    eb.top_k = K;
    eb.x = y.data();
    eb.expert_ids = topk_ids.data();
    eb.weights = topk_w.data();
    absl::Status routed;
    if (L.shared_down.empty()) {
      routed = moe_->Run(eb, tmp.data());
    } else {
      // The routed call (workers, or the in-process kernels on the pool) overlaps the shared
      // experts' BLAS work on this thread.
      std::thread worker([&] { routed = moe_->Run(eb, tmp.data()); });
      SwiGluMlp(L.shared_gate_up, L.shared_down, c.intermediate_size * c.n_shared_experts,
                y.data(), T, H, shared.data());
      worker.join();
      for (int64_t i = 0; i < T * H; ++i) h[i] += shared[i];
    }
    RETURN_IF_ERROR(routed);
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
  const int64_t NR = static_cast<int64_t>(rows.size());
  std::vector<float> sel(NR * H), normed(NR * H);
  for (int64_t r = 0; r < NR; ++r) std::memcpy(&sel[r * H], &h[rows[r] * H], H * sizeof(float));
  RmsNorm(sel.data(), final_norm_.data(), NR, H, eps, normed.data());
  out.logits.resize(static_cast<size_t>(NR) * c.vocab_size);
  const std::vector<float>& unembed = c.tie_word_embeddings ? embed_ : lm_head_;
  Linear(normed.data(), unembed.data(), nullptr, NR, c.vocab_size, H, out.logits.data());
  return out;
}

}  // namespace mxserve
