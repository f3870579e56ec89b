#include "tests/models/tiny_gpt_oss.h"

#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numbers>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"
#include "core/bf16.h"
#include "core/mxfp4.h"

namespace mxserve::testing {
namespace {

std::string L(int l, const char* rest) { return absl::StrCat("model.layers.", l, ".", rest); }

std::vector<uint8_t> Bf16Bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 2);
  for (size_t i = 0; i < v.size(); ++i) {
    const uint16_t h = FloatToBf16(v[i]);
    b[2 * i] = static_cast<uint8_t>(h & 0xFF);
    b[2 * i + 1] = static_cast<uint8_t>(h >> 8);
  }
  return b;
}

std::vector<uint8_t> F32Bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

class Writer {
 public:
  Writer(uint32_t seed, const std::vector<TensorOverride>& overrides)
      : rng_(seed), overrides_(overrides) {}

  std::vector<float> Normal(int64_t n, double mean, double stddev) {
    std::normal_distribution<double> dist(mean, stddev);
    std::vector<float> v(n);
    for (auto& x : v) x = static_cast<float>(dist(rng_));
    return v;
  }

  void Add(const std::string& name, DType dtype, std::vector<int64_t> shape,
           std::vector<uint8_t> bytes) {
    for (const TensorOverride& o : overrides_) {
      if (o.name != name) continue;
      int64_t n = 1;
      for (int64_t d : o.shape) n *= d;
      std::vector<uint8_t> junk(static_cast<size_t>(n) * DTypeSize(o.dtype));
      for (auto& b : junk) b = static_cast<uint8_t>(rng_() & 0x3F);  // small, finite values
      w_.Add(name, o.dtype, o.shape, std::move(junk));
      return;
    }
    w_.Add(name, dtype, std::move(shape), std::move(bytes));
  }
  void Dense(const std::string& name, std::vector<int64_t> shape, double mean, double stddev,
             bool f32 = false) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<float> v = Normal(n, mean, stddev);
    if (f32) {
      Add(name, DType::kF32, std::move(shape), F32Bytes(v));
    } else {
      Add(name, DType::kBF16, std::move(shape), Bf16Bytes(v));
    }
  }
  // [E, rows, cols] as MXFP4 blocks [E, rows, cols/32, 16] and scales [E, rows, cols/32].
  void Mxfp4(const std::string& prefix, int64_t e, int64_t rows, int64_t cols, double stddev) {
    const int64_t nb = cols / 32;
    std::vector<uint8_t> blocks(e * rows * nb * 16), scales(e * rows * nb);
    for (int64_t r = 0; r < e * rows; ++r) {
      std::vector<float> row = Normal(cols, 0.0, stddev);
      mxfp4::EncodeRow(row.data(), cols, &blocks[r * nb * 16], &scales[r * nb]);
    }
    Add(prefix + "_blocks", DType::kU8, {e, rows, nb, 16}, std::move(blocks));
    Add(prefix + "_scales", DType::kU8, {e, rows, nb}, std::move(scales));
  }
  absl::Status Write(const std::string& path) { return w_.Write(path); }

 private:
  std::mt19937 rng_;
  const std::vector<TensorOverride>& overrides_;
  SafetensorsWriter w_;
};

// Dense tensor → double, by its stored dtype (the reference's own decoding).
absl::StatusOr<std::vector<double>> ReadD(const Checkpoint& ckpt, const std::string& name) {
  auto t = ckpt.Get(name);
  if (!t.ok()) return t.status();
  std::vector<double> out(t->numel());
  for (int64_t i = 0; i < t->numel(); ++i) {
    if (t->dtype == DType::kBF16) {
      const uint32_t bits = static_cast<uint32_t>(t->data[2 * i] | (t->data[2 * i + 1] << 8)) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      out[i] = f;
    } else if (t->dtype == DType::kF32) {
      float f;
      std::memcpy(&f, t->data + 4 * i, 4);
      out[i] = f;
    } else {
      return absl::InvalidArgumentError("reference: unexpected dtype for " + name);
    }
  }
  return out;
}

// MXFP4 → double, straight from §1.2: element 32g+2j = LUT[b & 0xF], 32g+2j+1 = LUT[b >> 4],
// times 2^(scale - 127).
absl::StatusOr<std::vector<double>> ReadMxfp4(const Checkpoint& ckpt, const std::string& prefix) {
  static constexpr double kLut[16] = {0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6};
  auto blocks = ckpt.Get(prefix + "_blocks");
  if (!blocks.ok()) return blocks.status();
  auto scales = ckpt.Get(prefix + "_scales");
  if (!scales.ok()) return scales.status();
  const int64_t rows = blocks->shape[0] * blocks->shape[1], nb = blocks->shape[2];
  std::vector<double> out(rows * nb * 32);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < nb; ++g) {
      const double s = std::ldexp(1.0, static_cast<int>(scales->data[r * nb + g]) - 127);
      for (int j = 0; j < 16; ++j) {
        const uint8_t b = blocks->data[(r * nb + g) * 16 + j];
        out[r * nb * 32 + 32 * g + 2 * j] = kLut[b & 0xF] * s;
        out[r * nb * 32 + 32 * g + 2 * j + 1] = kLut[b >> 4] * s;
      }
    }
  }
  return out;
}

void RmsNormD(const std::vector<double>& x, const std::vector<double>& w, double eps,
              std::vector<double>& y) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double r = 1.0 / std::sqrt(ss / x.size() + eps);
  y.resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = w[i] * (x[i] * r);
}

// y[n] = W[n][k] x[k] + b[n]
std::vector<double> MatVec(const std::vector<double>& w, const double* bias,
                           const std::vector<double>& x, int64_t n) {
  const int64_t k = static_cast<int64_t>(x.size());
  std::vector<double> y(n);
  for (int64_t i = 0; i < n; ++i) {
    double s = bias != nullptr ? bias[i] : 0.0;
    for (int64_t j = 0; j < k; ++j) s += w[i * k + j] * x[j];
    y[i] = s;
  }
  return y;
}

}  // namespace

std::string TinyConfigJson(const TinySpec& s) {
  std::string types;
  for (size_t i = 0; i < s.layer_types.size(); ++i) {
    absl::StrAppend(&types, i ? ", " : "", "\"", s.layer_types[i], "\"");
  }
  return absl::StrCat(R"({
  "architectures": ["GptOssForCausalLM"],
  "model_type": "gpt_oss",
  "num_hidden_layers": )", s.layers, R"(,
  "hidden_size": )", s.hidden, R"(,
  "intermediate_size": )", s.intermediate, R"(,
  "num_local_experts": )", s.experts, R"(,
  "experts_per_token": )", s.top_k, R"(,
  "num_experts_per_tok": )", s.top_k, R"(,
  "num_attention_heads": )", s.heads, R"(,
  "num_key_value_heads": )", s.kv_heads, R"(,
  "head_dim": )", s.head_dim, R"(,
  "vocab_size": )", s.vocab, R"(,
  "sliding_window": )", s.sliding_window, R"(,
  "layer_types": [)", types, R"(],
  "max_position_embeddings": )", s.max_position, R"(,
  "initial_context_length": )", s.original_max_position, R"(,
  "rope_theta": )", s.rope_theta, R"(,
  "rope_scaling": {"rope_type": "yarn", "factor": )", s.factor,
                      R"(, "beta_fast": 32.0, "beta_slow": 1.0, "original_max_position_embeddings": )",
                      s.original_max_position, R"(, "truncate": )", s.truncate ? "true" : "false", R"(},
  "rms_norm_eps": 1e-05,
  "swiglu_limit": 7.0,
  "attention_bias": true,
  "tie_word_embeddings": false,
  "eos_token_id": 2,
  "pad_token_id": 1,
  "hidden_act": "silu",
  "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
}
)");
}

absl::Status WriteTinyModel(const std::string& dir, const TinySpec& s, uint32_t seed,
                            const std::vector<TensorOverride>& overrides) {
  Writer w(seed, overrides);
  const int64_t H = s.hidden, I = s.intermediate, E = s.experts;
  const int64_t qd = s.heads * s.head_dim, kvd = s.kv_heads * s.head_dim;
  w.Dense("model.embed_tokens.weight", {s.vocab, H}, 0.0, 1.0);
  for (int l = 0; l < s.layers; ++l) {
    w.Dense(L(l, "input_layernorm.weight"), {H}, 1.0, 0.2, /*f32=*/l == 0);
    w.Dense(L(l, "self_attn.q_proj.weight"), {qd, H}, 0.0, 1.0 / std::sqrt(H));
    w.Dense(L(l, "self_attn.q_proj.bias"), {qd}, 0.0, 0.1);
    w.Dense(L(l, "self_attn.k_proj.weight"), {kvd, H}, 0.0, 1.0 / std::sqrt(H));
    w.Dense(L(l, "self_attn.k_proj.bias"), {kvd}, 0.0, 0.1);
    w.Dense(L(l, "self_attn.v_proj.weight"), {kvd, H}, 0.0, 1.0 / std::sqrt(H));
    w.Dense(L(l, "self_attn.v_proj.bias"), {kvd}, 0.0, 0.1);
    w.Dense(L(l, "self_attn.o_proj.weight"), {H, qd}, 0.0, 1.0 / std::sqrt(qd));
    w.Dense(L(l, "self_attn.o_proj.bias"), {H}, 0.0, 0.1);
    w.Dense(L(l, "self_attn.sinks"), {s.heads}, 0.0, 1.0);
    w.Dense(L(l, "post_attention_layernorm.weight"), {H}, 1.0, 0.2, /*f32=*/l == 0);
    w.Dense(L(l, "mlp.router.weight"), {E, H}, 0.0, 2.0 / std::sqrt(H));
    w.Dense(L(l, "mlp.router.bias"), {E}, 0.0, 0.1);
    // gate/up pre-activations of std ~3 so the swiglu clamp at 7 is reached now and then.
    w.Mxfp4(L(l, "mlp.experts.gate_up_proj"), E, 2 * I, H, 3.0 / std::sqrt(H));
    w.Dense(L(l, "mlp.experts.gate_up_proj_bias"), {E, 2 * I}, 0.0, 0.5);
    w.Mxfp4(L(l, "mlp.experts.down_proj"), E, H, I, 1.0 / std::sqrt(I));
    w.Dense(L(l, "mlp.experts.down_proj_bias"), {E, H}, 0.0, 0.1);
  }
  w.Dense("model.norm.weight", {H}, 1.0, 0.2, /*f32=*/true);
  w.Dense("lm_head.weight", {s.vocab, H}, 0.0, 2.0 / std::sqrt(H));
  std::ofstream cfg(dir + "/config.json");
  cfg << TinyConfigJson(s);
  cfg.close();
  if (!cfg) return absl::InternalError("cannot write " + dir + "/config.json");
  return w.Write(dir + "/model.safetensors");
}

TempDir::TempDir() {
  const char* base = getenv("TEST_TMPDIR");
  std::string tmpl = absl::StrCat(base != nullptr ? base : "/tmp", "/mxs_models_XXXXXX");
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  const char* d = mkdtemp(buf.data());
  if (d != nullptr) path_ = d;
}

TempDir::~TempDir() {
  std::error_code ec;
  if (!path_.empty()) std::filesystem::remove_all(path_, ec);
}

void ReferenceGptOss::RopeTable(const ModelConfig& c, std::vector<double>& inv_freq, double& m,
                                double& low, double& high) {
  const int d = c.head_dim;
  const double b = c.rope_theta;
  inv_freq.assign(d / 2, 0.0);
  if (c.rope_scaling.rope_type != "yarn") {
    for (int i = 0; i < d / 2; ++i) inv_freq[i] = 1.0 / std::pow(b, 2.0 * i / d);
    m = 1.0;
    low = high = 0.0;
    return;
  }
  const double s = c.rope_scaling.factor;
  const double L0 = static_cast<double>(c.rope_scaling.original_max_position_embeddings);
  auto corr = [&](double n) { return d * std::log(L0 / (2 * std::numbers::pi * n)) / (2 * std::log(b)); };
  low = corr(c.rope_scaling.beta_fast);
  high = corr(c.rope_scaling.beta_slow);
  if (c.rope_scaling.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, d - 1.0);
  for (int i = 0; i < d / 2; ++i) {
    const double pos_freq = std::pow(b, 2.0 * i / d);
    const double extrap = 1.0 / pos_freq, interp = 1.0 / (s * pos_freq);
    const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
    inv_freq[i] = interp * ramp + extrap * (1.0 - ramp);
  }
  m = 0.1 * std::log(s) + 1.0;
}

absl::StatusOr<ReferenceGptOss> ReferenceGptOss::Load(const ModelConfig& c, const Checkpoint& ck) {
  ReferenceGptOss r;
  r.c_ = c;
  double low, high;
  RopeTable(c, r.inv_freq_, r.m_, low, high);
  auto get = [&](const std::string& n, std::vector<double>& out) -> absl::Status {
    auto v = ReadD(ck, n);
    if (!v.ok()) return v.status();
    out = std::move(*v);
    return absl::OkStatus();
  };
  absl::Status st;
#define REF_GET(name, dst) \
  if (!(st = get(name, dst)).ok()) return st
  REF_GET("model.embed_tokens.weight", r.embed_);
  REF_GET("model.norm.weight", r.norm_);
  REF_GET("lm_head.weight", r.lm_head_);
  r.layers_.resize(c.num_hidden_layers);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    Layer& y = r.layers_[l];
    REF_GET(L(l, "input_layernorm.weight"), y.in_norm);
    REF_GET(L(l, "post_attention_layernorm.weight"), y.post_norm);
    REF_GET(L(l, "self_attn.q_proj.weight"), y.wq);
    REF_GET(L(l, "self_attn.q_proj.bias"), y.bq);
    REF_GET(L(l, "self_attn.k_proj.weight"), y.wk);
    REF_GET(L(l, "self_attn.k_proj.bias"), y.bk);
    REF_GET(L(l, "self_attn.v_proj.weight"), y.wv);
    REF_GET(L(l, "self_attn.v_proj.bias"), y.bv);
    REF_GET(L(l, "self_attn.o_proj.weight"), y.wo);
    REF_GET(L(l, "self_attn.o_proj.bias"), y.bo);
    REF_GET(L(l, "self_attn.sinks"), y.sinks);
    REF_GET(L(l, "mlp.router.weight"), y.wr);
    REF_GET(L(l, "mlp.router.bias"), y.br);
    REF_GET(L(l, "mlp.experts.gate_up_proj_bias"), y.gate_up_b);
    REF_GET(L(l, "mlp.experts.down_proj_bias"), y.down_b);
    auto gu = ReadMxfp4(ck, L(l, "mlp.experts.gate_up_proj"));
    if (!gu.ok()) return gu.status();
    y.gate_up = std::move(*gu);
    auto dn = ReadMxfp4(ck, L(l, "mlp.experts.down_proj"));
    if (!dn.ok()) return dn.status();
    y.down = std::move(*dn);
  }
#undef REF_GET
  return r;
}

void ReferenceGptOss::Expert(int layer, int e, const double* x, double* out) const {
  const Layer& y = layers_[layer];
  const int H = c_.hidden_size, I = c_.intermediate_size;
  const double limit = c_.swiglu_limit, alpha = c_.swiglu_alpha;
  std::vector<double> act(I);
  for (int k = 0; k < I; ++k) {
    double g = y.gate_up_b[static_cast<size_t>(e) * 2 * I + 2 * k];
    double u = y.gate_up_b[static_cast<size_t>(e) * 2 * I + 2 * k + 1];
    const double* wg = &y.gate_up[(static_cast<size_t>(e) * 2 * I + 2 * k) * H];
    const double* wu = wg + H;
    for (int i = 0; i < H; ++i) {
      g += wg[i] * x[i];
      u += wu[i] * x[i];
    }
    g = std::min(g, limit);
    u = std::clamp(u, -limit, limit);
    act[k] = (u + 1.0) * g / (1.0 + std::exp(-alpha * g));
  }
  for (int o = 0; o < H; ++o) {
    double s = y.down_b[static_cast<size_t>(e) * H + o];
    const double* wd = &y.down[(static_cast<size_t>(e) * H + o) * I];
    for (int k = 0; k < I; ++k) s += wd[k] * act[k];
    out[o] = s;
  }
}

std::vector<std::vector<double>> ReferenceGptOss::Logits(const std::vector<int32_t>& ids) const {
  const int T = static_cast<int>(ids.size()), H = c_.hidden_size, d = c_.head_dim;
  const int nq = c_.num_attention_heads, nkv = c_.num_key_value_heads, E = c_.num_local_experts;
  const int K = c_.num_experts_per_tok, half = d / 2;
  const double eps = c_.rms_norm_eps;
  std::vector<std::vector<double>> h(T, std::vector<double>(H));
  for (int t = 0; t < T; ++t) {
    for (int i = 0; i < H; ++i) h[t][i] = embed_[static_cast<size_t>(ids[t]) * H + i];
  }
  auto rope = [&](std::vector<double>& v, int heads, int t) {
    for (int hd = 0; hd < heads; ++hd) {
      double* x = &v[hd * d];
      for (int i = 0; i < half; ++i) {
        const double c = std::cos(t * inv_freq_[i]) * m_, s = std::sin(t * inv_freq_[i]) * m_;
        const double x1 = x[i], x2 = x[i + half];
        x[i] = x1 * c - x2 * s;
        x[i + half] = x2 * c + x1 * s;
      }
    }
  };
  for (int l = 0; l < c_.num_hidden_layers; ++l) {
    const Layer& y = layers_[l];
    std::vector<std::vector<double>> q(T), k(T), v(T);
    std::vector<double> xn;
    for (int t = 0; t < T; ++t) {
      RmsNormD(h[t], y.in_norm, eps, xn);
      q[t] = MatVec(y.wq, y.bq.data(), xn, nq * d);
      k[t] = MatVec(y.wk, y.bk.data(), xn, nkv * d);
      v[t] = MatVec(y.wv, y.bv.data(), xn, nkv * d);
      rope(q[t], nq, t);
      rope(k[t], nkv, t);
    }
    const bool sliding = c_.layer_types[l] == "sliding_attention";
    for (int i = 0; i < T; ++i) {
      std::vector<double> o(nq * d, 0.0);
      for (int hq = 0; hq < nq; ++hq) {
        const int kh = hq / (nq / nkv);
        std::vector<double> s;
        std::vector<int> js;
        for (int j = 0; j <= i; ++j) {
          if (sliding && !(j > i - c_.sliding_window)) continue;
          double dot = 0;
          for (int e = 0; e < d; ++e) dot += q[i][hq * d + e] * k[j][kh * d + e];
          s.push_back(dot / std::sqrt(static_cast<double>(d)));
          js.push_back(j);
        }
        // softmax over [s..., sink]; the sink column is dropped.
        double denom = std::exp(y.sinks[hq]);
        for (double sv : s) denom += std::exp(sv);
        for (size_t a = 0; a < s.size(); ++a) {
          const double p = std::exp(s[a]) / denom;
          for (int e = 0; e < d; ++e) o[hq * d + e] += p * v[js[a]][kh * d + e];
        }
      }
      std::vector<double> proj = MatVec(y.wo, y.bo.data(), o, H);
      for (int a = 0; a < H; ++a) h[i][a] += proj[a];
    }
    for (int t = 0; t < T; ++t) {
      RmsNormD(h[t], y.post_norm, eps, xn);
      std::vector<double> z = MatVec(y.wr, y.br.data(), xn, E);
      std::vector<int> order(E);
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return z[a] > z[b]; });
      double sum = 0;
      for (int j = 0; j < K; ++j) sum += std::exp(z[order[j]]);
      std::vector<double> out(H);
      for (int j = 0; j < K; ++j) {
        const double w = std::exp(z[order[j]]) / sum;
        Expert(l, order[j], xn.data(), out.data());
        for (int a = 0; a < H; ++a) h[t][a] += w * out[a];
      }
    }
  }
  std::vector<std::vector<double>> logits(T);
  std::vector<double> xn;
  for (int t = 0; t < T; ++t) {
    RmsNormD(h[t], norm_, eps, xn);
    logits[t] = MatVec(lm_head_, nullptr, xn, c_.vocab_size);
  }
  return logits;
}

absl::Status NaiveMoeExecutor::Run(const ExpertBatch& batch, float* out) {
  const int layer = batch.layer, num_tokens = batch.num_tokens;
  const int hidden = batch.hidden, top_k = batch.top_k;
  const float* x = batch.x;
  const int32_t* expert_ids = batch.expert_ids;
  const float* weights = batch.weights;
  ++calls_;
  std::vector<double> xd(hidden), eo(hidden), acc(hidden);
  for (int t = 0; t < num_tokens; ++t) {
    for (int i = 0; i < hidden; ++i) xd[i] = x[static_cast<size_t>(t) * hidden + i];
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int j = 0; j < top_k; ++j) {
      ref_->Expert(layer, expert_ids[t * top_k + j], xd.data(), eo.data());
      for (int i = 0; i < hidden; ++i) acc[i] += weights[t * top_k + j] * eo[i];
    }
    for (int i = 0; i < hidden; ++i) out[static_cast<size_t>(t) * hidden + i] = static_cast<float>(acc[i]);
  }
  return absl::OkStatus();
}

double RelL2(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  if (a.size() != b.size()) return INFINITY;
  return std::sqrt(num / (den > 0 ? den : 1.0));
}

}  // namespace mxserve::testing
