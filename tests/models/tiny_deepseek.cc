#include "tests/models/tiny_deepseek.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numbers>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace mxserve::testing {
namespace {

std::string L(int l, const std::string& rest) { return absl::StrCat("model.layers.", l, ".", rest); }

// Round to nearest even bf16; the twin decodes by shifting the bits back.
uint16_t ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7FFF + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}

class Writer {
 public:
  explicit Writer(uint32_t seed) : rng_(seed) {}
  std::vector<float> Normal(int64_t n, double mean, double sd) {
    std::normal_distribution<double> d(mean, sd);
    std::vector<float> v(n);
    for (auto& x : v) x = static_cast<float>(d(rng_));
    return v;
  }
  void Add(const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v,
           bool f32 = false) {
    std::vector<uint8_t> b(v.size() * (f32 ? 4 : 2));
    for (size_t i = 0; i < v.size(); ++i) {
      if (f32) {
        std::memcpy(&b[4 * i], &v[i], 4);
      } else {
        const uint16_t h = ToBf16(v[i]);
        b[2 * i] = static_cast<uint8_t>(h & 0xFF);
        b[2 * i + 1] = static_cast<uint8_t>(h >> 8);
      }
    }
    w_.Add(name, f32 ? DType::kF32 : DType::kBF16, std::move(shape), std::move(b));
  }
  void Dense(const std::string& name, std::vector<int64_t> shape, double mean, double sd,
             bool f32 = false) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    Add(name, std::move(shape), Normal(n, mean, sd), f32);
  }
  // [rows, cols] whose every 32-block along a row is E2M1 values times one power of two
  // (2^-5..2^-3): exactly MXFP4 (and bf16).
  void Mxfp4Exact(const std::string& name, int64_t rows, int64_t cols) {
    static constexpr float kE2M1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    std::vector<float> v(rows * cols);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t b = 0; b < cols / 32; ++b) {
        const float scale = std::ldexp(1.0f, -5 + static_cast<int>(rng_() % 3));
        for (int j = 0; j < 32; ++j) {
          const uint32_t code = rng_() % 16;
          const float mag = kE2M1[code & 7] * scale;
          v[r * cols + b * 32 + j] = (code & 8) ? -mag : mag;
        }
      }
    }
    Add(name, {rows, cols}, v);
  }
  absl::Status Write(const std::string& path) { return w_.Write(path); }

 private:
  std::mt19937 rng_;
  SafetensorsWriter w_;
};

// Tensor as doubles (BF16 or F32), with its element count checked.
absl::StatusOr<std::vector<double>> Read(const Checkpoint& ck, const std::string& name, int64_t n) {
  auto t = ck.Get(name);
  if (!t.ok()) return t.status();
  if (t->numel() != n) return absl::InvalidArgumentError(absl::StrCat(name, ": wrong size"));
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) {
    if (t->dtype == DType::kF32) {
      float f;
      std::memcpy(&f, t->data + 4 * i, 4);
      v[i] = f;
    } else {
      uint16_t h;
      std::memcpy(&h, t->data + 2 * i, 2);
      const uint32_t u = static_cast<uint32_t>(h) << 16;
      float f;
      std::memcpy(&f, &u, 4);
      v[i] = f;
    }
  }
  return v;
}

// y[rows] = W[rows][cols] x[cols].
std::vector<double> MatVec(const std::vector<double>& w, const std::vector<double>& x, int rows,
                           int cols, int x_off = 0) {
  std::vector<double> y(rows, 0.0);
  for (int r = 0; r < rows; ++r) {
    double a = 0;
    for (int c = 0; c < cols; ++c) a += w[static_cast<size_t>(r) * cols + c] * x[x_off + c];
    y[r] = a;
  }
  return y;
}

std::vector<double> RmsNorm(const std::vector<double>& x, const std::vector<double>& w, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double inv = 1.0 / std::sqrt(ss / x.size() + eps);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = w[i] * x[i] * inv;
  return y;
}

double Silu(double x) { return x / (1.0 + std::exp(-x)); }
double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double GetMscale(double f, double m) { return f <= 1.0 ? 1.0 : 0.1 * m * std::log(f) + 1.0; }

// SwiGLU MLP: down(silu(gate x) * up x).
std::vector<double> Mlp(const std::vector<double>& g, const std::vector<double>& u,
                        const std::vector<double>& d, int I, int H, const std::vector<double>& x) {
  std::vector<double> a = MatVec(g, x, I, H), b = MatVec(u, x, I, H);
  for (int i = 0; i < I; ++i) a[i] = Silu(a[i]) * b[i];
  return MatVec(d, a, H, I);
}

}  // namespace

std::string TinyDsConfigJson(const TinyDsSpec& s) {
  nlohmann::json j = {
      {"architectures", {"DeepseekV3ForCausalLM"}},
      {"model_type", s.model_type},
      {"vocab_size", s.vocab},
      {"hidden_size", s.hidden},
      {"intermediate_size", s.dense_inter},
      {"moe_intermediate_size", s.moe_inter},
      {"num_hidden_layers", s.layers},
      {"num_attention_heads", s.heads},
      {"num_key_value_heads", s.heads},
      {"n_shared_experts", s.n_shared},
      {"n_routed_experts", s.experts},
      {"num_experts_per_tok", s.top_k},
      {"n_group", s.n_group},
      {"topk_group", s.topk_group},
      {"first_k_dense_replace", s.first_dense},
      {"moe_layer_freq", 1},
      {"norm_topk_prob", s.norm_topk_prob},
      {"routed_scaling_factor", s.routed_scaling},
      {"scoring_func", "sigmoid"},
      {"topk_method", "noaux_tc"},
      {"hidden_act", "silu"},
      {"kv_lora_rank", s.kv_lora},
      {"qk_nope_head_dim", s.nope},
      {"qk_rope_head_dim", s.rope},
      {"v_head_dim", s.v},
      {"max_position_embeddings", s.max_position},
      {"rope_theta", s.rope_theta},
      {"rope_interleave", true},
      {"rms_norm_eps", s.rms_norm_eps},
      {"attention_bias", false},
      {"tie_word_embeddings", false},
      {"num_nextn_predict_layers", 0},
      {"torch_dtype", "bfloat16"},
  };
  j["q_lora_rank"] = s.q_lora > 0 ? nlohmann::json(s.q_lora) : nlohmann::json(nullptr);
  if (s.yarn) {
    j["rope_scaling"] = {{"type", "yarn"},
                         {"factor", s.factor},
                         {"original_max_position_embeddings", s.original_max_position},
                         {"beta_fast", s.beta_fast},
                         {"beta_slow", s.beta_slow},
                         {"mscale", s.mscale},
                         {"mscale_all_dim", s.mscale_all_dim}};
  } else {
    j["rope_scaling"] = nullptr;
  }
  return j.dump(2);
}

absl::Status WriteTinyDeepseek(const std::string& dir, const TinyDsSpec& s, uint32_t seed) {
  Writer w(seed);
  const int64_t H = s.hidden, nh = s.heads, qhd = s.nope + s.rope, E = s.experts;
  const double sd = 1.0 / std::sqrt(static_cast<double>(H));
  w.Dense("model.embed_tokens.weight", {s.vocab, H}, 0.0, 1.0);
  w.Dense("model.norm.weight", {H}, 1.0, 0.1, /*f32=*/true);
  w.Dense("lm_head.weight", {s.vocab, H}, 0.0, sd);
  for (int l = 0; l < s.layers; ++l) {
    const bool f32 = l == 0;
    w.Dense(L(l, "input_layernorm.weight"), {H}, 1.0, 0.1, f32);
    w.Dense(L(l, "post_attention_layernorm.weight"), {H}, 1.0, 0.1, f32);
    if (s.q_lora > 0) {
      w.Dense(L(l, "self_attn.q_a_proj.weight"), {s.q_lora, H}, 0.0, sd);
      w.Dense(L(l, "self_attn.q_a_layernorm.weight"), {s.q_lora}, 1.0, 0.1, f32);
      w.Dense(L(l, "self_attn.q_b_proj.weight"), {nh * qhd, s.q_lora}, 0.0, 0.3);
    } else {
      w.Dense(L(l, "self_attn.q_proj.weight"), {nh * qhd, H}, 0.0, 0.3);
    }
    w.Dense(L(l, "self_attn.kv_a_proj_with_mqa.weight"), {s.kv_lora + s.rope, H}, 0.0, 0.3);
    w.Dense(L(l, "self_attn.kv_a_layernorm.weight"), {s.kv_lora}, 1.0, 0.1, f32);
    w.Dense(L(l, "self_attn.kv_b_proj.weight"), {nh * (s.nope + s.v), s.kv_lora}, 0.0, 0.3);
    w.Dense(L(l, "self_attn.o_proj.weight"), {H, nh * s.v}, 0.0, 0.15);
    if (l < s.first_dense) {
      w.Dense(L(l, "mlp.gate_proj.weight"), {s.dense_inter, H}, 0.0, sd);
      w.Dense(L(l, "mlp.up_proj.weight"), {s.dense_inter, H}, 0.0, sd);
      w.Dense(L(l, "mlp.down_proj.weight"), {H, s.dense_inter}, 0.0, 0.15);
      continue;
    }
    w.Dense(L(l, "mlp.gate.weight"), {E, H}, 0.0, 0.2);
    w.Dense(L(l, "mlp.gate.e_score_correction_bias"), {E}, 0.0, s.bias_std, /*f32=*/true);
    for (int e = 0; e < E; ++e) {
      const std::string p = absl::StrCat("mlp.experts.", e, ".");
      w.Mxfp4Exact(L(l, p + "gate_proj.weight"), s.moe_inter, H);
      w.Mxfp4Exact(L(l, p + "up_proj.weight"), s.moe_inter, H);
      w.Mxfp4Exact(L(l, p + "down_proj.weight"), H, s.moe_inter);
    }
    if (s.n_shared > 0) {
      const int64_t I = int64_t{s.moe_inter} * s.n_shared;
      w.Dense(L(l, "mlp.shared_experts.gate_proj.weight"), {I, H}, 0.0, sd);
      w.Dense(L(l, "mlp.shared_experts.up_proj.weight"), {I, H}, 0.0, sd);
      w.Dense(L(l, "mlp.shared_experts.down_proj.weight"), {H, I}, 0.0, 0.15);
    }
  }
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/config.json") << TinyDsConfigJson(s);
  return w.Write(dir + "/model.safetensors");
}

absl::StatusOr<ReferenceDeepseek> ReferenceDeepseek::Load(const TinyDsSpec& s,
                                                          const Checkpoint& ck) {
  ReferenceDeepseek r;
  r.s_ = s;
  const int64_t H = s.hidden, nh = s.heads, qhd = s.nope + s.rope, E = s.experts;
  auto get = [&](const std::string& name, int64_t n, std::vector<double>& out) -> absl::Status {
    auto v = Read(ck, name, n);
    if (!v.ok()) return v.status();
    out = *std::move(v);
    return absl::OkStatus();
  };
#define REF_GET(name, n, out) \
  if (absl::Status st = get(name, n, out); !st.ok()) return st
  REF_GET("model.embed_tokens.weight", s.vocab * H, r.embed_);
  REF_GET("model.norm.weight", H, r.norm_);
  REF_GET("lm_head.weight", s.vocab * H, r.lm_head_);
  r.layers_.resize(s.layers);
  for (int l = 0; l < s.layers; ++l) {
    Layer& y = r.layers_[l];
    REF_GET(L(l, "input_layernorm.weight"), H, y.in_norm);
    REF_GET(L(l, "post_attention_layernorm.weight"), H, y.post_norm);
    if (s.q_lora > 0) {
      REF_GET(L(l, "self_attn.q_a_proj.weight"), s.q_lora * H, y.qa);
      REF_GET(L(l, "self_attn.q_a_layernorm.weight"), s.q_lora, y.qa_norm);
      REF_GET(L(l, "self_attn.q_b_proj.weight"), nh * qhd * s.q_lora, y.qb);
    } else {
      REF_GET(L(l, "self_attn.q_proj.weight"), nh * qhd * H, y.q);
    }
    REF_GET(L(l, "self_attn.kv_a_proj_with_mqa.weight"), (s.kv_lora + s.rope) * H, y.kva);
    REF_GET(L(l, "self_attn.kv_a_layernorm.weight"), s.kv_lora, y.kva_norm);
    REF_GET(L(l, "self_attn.kv_b_proj.weight"), nh * (s.nope + s.v) * s.kv_lora, y.kvb);
    REF_GET(L(l, "self_attn.o_proj.weight"), H * nh * s.v, y.o);
    if (l < s.first_dense) {
      REF_GET(L(l, "mlp.gate_proj.weight"), s.dense_inter * H, y.gate);
      REF_GET(L(l, "mlp.up_proj.weight"), s.dense_inter * H, y.up);
      REF_GET(L(l, "mlp.down_proj.weight"), H * s.dense_inter, y.down);
      continue;
    }
    REF_GET(L(l, "mlp.gate.weight"), E * H, y.router);
    REF_GET(L(l, "mlp.gate.e_score_correction_bias"), E, y.bias);
    y.eg.resize(E);
    y.eu.resize(E);
    y.ed.resize(E);
    for (int e = 0; e < E; ++e) {
      const std::string p = absl::StrCat("mlp.experts.", e, ".");
      REF_GET(L(l, p + "gate_proj.weight"), s.moe_inter * H, y.eg[e]);
      REF_GET(L(l, p + "up_proj.weight"), s.moe_inter * H, y.eu[e]);
      REF_GET(L(l, p + "down_proj.weight"), H * s.moe_inter, y.ed[e]);
    }
    if (s.n_shared > 0) {
      const int64_t I = int64_t{s.moe_inter} * s.n_shared;
      REF_GET(L(l, "mlp.shared_experts.gate_proj.weight"), I * H, y.sg);
      REF_GET(L(l, "mlp.shared_experts.up_proj.weight"), I * H, y.su);
      REF_GET(L(l, "mlp.shared_experts.down_proj.weight"), H * I, y.sd);
    }
  }
#undef REF_GET
  // YaRN (HF _compute_yarn_parameters, truncate=true) in double.
  const int d = s.rope;
  r.inv_freq_.resize(d / 2);
  for (int i = 0; i < d / 2; ++i) {
    const double pos_freq = std::pow(s.rope_theta, 2.0 * i / d);
    if (!s.yarn) {
      r.inv_freq_[i] = 1.0 / pos_freq;
      continue;
    }
    auto corr = [&](double rot) {
      return d * std::log(s.original_max_position / (rot * 2 * std::numbers::pi)) /
             (2 * std::log(s.rope_theta));
    };
    double low = std::max(std::floor(corr(s.beta_fast)), 0.0);
    double high = std::min(std::ceil(corr(s.beta_slow)), d - 1.0);
    if (low == high) high += 0.001;
    const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
    const double extrap_factor = 1.0 - ramp;
    r.inv_freq_[i] = (1.0 / (s.factor * pos_freq)) * (1 - extrap_factor) +
                     (1.0 / pos_freq) * extrap_factor;
  }
  r.attn_factor_ = s.yarn ? GetMscale(s.factor, s.mscale) / GetMscale(s.factor, s.mscale_all_dim) : 1.0;
  r.scale_ = 1.0 / std::sqrt(static_cast<double>(s.nope + s.rope));
  if (s.yarn && s.mscale_all_dim != 0) {
    const double m = GetMscale(s.factor, s.mscale_all_dim);
    r.scale_ *= m * m;
  }
  return r;
}

std::vector<std::vector<double>> ReferenceDeepseek::Logits(const std::vector<int32_t>& tokens) const {
  const TinyDsSpec& s = s_;
  const int T = static_cast<int>(tokens.size()), H = s.hidden, nh = s.heads;
  const int P = s.nope, R = s.rope, Vd = s.v, Rkv = s.kv_lora, qhd = P + R, E = s.experts;
  std::vector<std::vector<double>> x(T);
  for (int t = 0; t < T; ++t) {
    x[t].assign(embed_.begin() + static_cast<size_t>(tokens[t]) * H,
                embed_.begin() + static_cast<size_t>(tokens[t] + 1) * H);
  }
  // HF rope_interleave: permute the rope dims to [0, 2, 4, ..., 1, 3, 5, ...], then rotate_half
  // with cos/sin repeated over both halves (and multiplied by the attention factor).
  auto rope = [&](const double* in, int pos, double* out) {
    std::vector<double> p(R), c(R), sn(R);
    for (int i = 0; i < R / 2; ++i) {
      p[i] = in[2 * i];
      p[R / 2 + i] = in[2 * i + 1];
      const double f = pos * inv_freq_[i];
      c[i] = c[R / 2 + i] = std::cos(f) * attn_factor_;
      sn[i] = sn[R / 2 + i] = std::sin(f) * attn_factor_;
    }
    for (int i = 0; i < R; ++i) {
      const double rot = i < R / 2 ? -p[i + R / 2] : p[i - R / 2];
      out[i] = p[i] * c[i] + rot * sn[i];
    }
  };
  for (int l = 0; l < s.layers; ++l) {
    const Layer& y = layers_[l];
    // q [T][nh][qhd], k [T][nh][qhd], v [T][nh][Vd], the naive form.
    std::vector<std::vector<double>> q(T), k(T), v(T);
    for (int t = 0; t < T; ++t) {
      const std::vector<double> hn = RmsNorm(x[t], y.in_norm, s.rms_norm_eps);
      if (s.q_lora > 0) {
        std::vector<double> cq = RmsNorm(MatVec(y.qa, hn, s.q_lora, H), y.qa_norm, 1e-6);
        q[t] = MatVec(y.qb, cq, nh * qhd, s.q_lora);
      } else {
        q[t] = MatVec(y.q, hn, nh * qhd, H);
      }
      const std::vector<double> ckv = MatVec(y.kva, hn, Rkv + R, H);
      const std::vector<double> c =
          RmsNorm(std::vector<double>(ckv.begin(), ckv.begin() + Rkv), y.kva_norm, 1e-6);
      std::vector<double> kpe(R);
      rope(&ckv[Rkv], t, kpe.data());
      const std::vector<double> kv = MatVec(y.kvb, c, nh * (P + Vd), Rkv);
      k[t].resize(nh * qhd);
      v[t].resize(nh * Vd);
      for (int h = 0; h < nh; ++h) {
        std::vector<double> qr(R);
        rope(&q[t][h * qhd + P], t, qr.data());
        std::copy(qr.begin(), qr.end(), q[t].begin() + h * qhd + P);
        std::copy(kv.begin() + h * (P + Vd), kv.begin() + h * (P + Vd) + P, k[t].begin() + h * qhd);
        std::copy(kpe.begin(), kpe.end(), k[t].begin() + h * qhd + P);
        std::copy(kv.begin() + h * (P + Vd) + P, kv.begin() + (h + 1) * (P + Vd), v[t].begin() + h * Vd);
      }
    }
    for (int t = 0; t < T; ++t) {
      std::vector<double> o(nh * Vd, 0.0);
      for (int h = 0; h < nh; ++h) {
        std::vector<double> sc(t + 1);
        double mx = -1e300;
        for (int j = 0; j <= t; ++j) {
          double a = 0;
          for (int e = 0; e < qhd; ++e) a += q[t][h * qhd + e] * k[j][h * qhd + e];
          sc[j] = a * scale_;
          mx = std::max(mx, sc[j]);
        }
        double den = 0;
        for (double& z : sc) den += (z = std::exp(z - mx));
        for (int j = 0; j <= t; ++j) {
          for (int e = 0; e < Vd; ++e) o[h * Vd + e] += sc[j] / den * v[j][h * Vd + e];
        }
      }
      const std::vector<double> a = MatVec(y.o, o, H, nh * Vd);
      for (int i = 0; i < H; ++i) x[t][i] += a[i];
    }
    for (int t = 0; t < T; ++t) {
      const std::vector<double> hn = RmsNorm(x[t], y.post_norm, s.rms_norm_eps);
      std::vector<double> add(H, 0.0);
      if (l < s.first_dense) {
        add = Mlp(y.gate, y.up, y.down, s.dense_inter, H, hn);
      } else {
        const std::vector<double> z = MatVec(y.router, hn, E, H);
        std::vector<double> sc(E), ch(E);
        for (int e = 0; e < E; ++e) {
          sc[e] = Sigmoid(z[e]);
          ch[e] = sc[e] + y.bias[e];
        }
        // Groups by the sum of their two best; the rest masked to -inf.
        const int per = E / s.n_group;
        std::vector<std::pair<double, int>> gs;
        for (int g = 0; g < s.n_group; ++g) {
          std::vector<double> m(ch.begin() + g * per, ch.begin() + (g + 1) * per);
          std::sort(m.rbegin(), m.rend());
          gs.push_back({-(m[0] + (per > 1 ? m[1] : 0.0)), g});
        }
        std::sort(gs.begin(), gs.end());
        std::vector<double> masked(E, -INFINITY);
        for (int i = 0; i < s.topk_group; ++i) {
          const int g = gs[i].second;
          for (int e = g * per; e < (g + 1) * per; ++e) masked[e] = ch[e];
        }
        std::vector<int> idx(E);
        std::iota(idx.begin(), idx.end(), 0);
        std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return masked[a] > masked[b]; });
        double sum = 0;
        for (int kk = 0; kk < s.top_k; ++kk) sum += sc[idx[kk]];
        for (int kk = 0; kk < s.top_k; ++kk) {
          const int e = idx[kk];
          double w = s.norm_topk_prob ? sc[e] / (sum + 1e-20) : sc[e];
          w *= s.routed_scaling;
          const std::vector<double> out = Mlp(y.eg[e], y.eu[e], y.ed[e], s.moe_inter, H, hn);
          for (int i = 0; i < H; ++i) add[i] += w * out[i];
        }
        if (s.n_shared > 0) {
          const std::vector<double> sh = Mlp(y.sg, y.su, y.sd, s.moe_inter * s.n_shared, H, hn);
          for (int i = 0; i < H; ++i) add[i] += sh[i];
        }
      }
      for (int i = 0; i < H; ++i) x[t][i] += add[i];
    }
  }
  std::vector<std::vector<double>> logits(T);
  for (int t = 0; t < T; ++t) {
    logits[t] = MatVec(lm_head_, RmsNorm(x[t], norm_, s.rms_norm_eps), s.vocab, H);
  }
  return logits;
}

std::vector<int32_t> ReferenceDeepseek::Greedy(std::vector<int32_t> prompt, int n) const {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) {
    const std::vector<double> last = Logits(prompt).back();
    const int32_t id = static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin());
    out.push_back(id);
    prompt.push_back(id);
  }
  return out;
}

double RelL2D(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / den);
}

}  // namespace mxserve::testing
