#include "coordinator/gpu/gpt_oss_gpu.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "coordinator/models/gpt_oss.h"
#include "core/bf16.h"
#include "core/status.h"
#include "experts/expert_shard.h"

namespace mxserve::gpu {
namespace {

namespace dk = kernels::cuda::dense;
using kernels::cuda::CudaCheck;

std::string LayerName(int l, const char* rest) {
  return absl::StrCat("model.layers.", l, ".", rest);
}

// The tensor as stored (BF16 or F32, as the CPU model accepts), shape checked.
absl::StatusOr<TensorView> GetDense(const Checkpoint& ckpt, const std::string& name,
                                    const std::vector<int64_t>& shape) {
  ASSIGN_OR_RETURN(TensorView any, ckpt.Get(name));
  const DType want = any.dtype == DType::kF32 ? DType::kF32 : DType::kBF16;
  ASSIGN_OR_RETURN(TensorView t, ckpt.Get(name, want, shape));
  if (static_cast<size_t>(t.numel()) * DTypeSize(want) != t.nbytes) {
    return absl::DataLossError(absl::StrCat("tensor '", name, "' in ", t.file, ": ", t.nbytes,
                                            " bytes for ", t.numel(), " elements"));
  }
  return t;
}

int64_t Numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Copies the tensor as bf16 to dst (device, large enough).
absl::Status UploadBf16(const Checkpoint& ckpt, const std::string& name,
                        const std::vector<int64_t>& shape, uint16_t* dst) {
  ASSIGN_OR_RETURN(TensorView t, GetDense(ckpt, name, shape));
  const int64_t n = t.numel();
  if (t.dtype == DType::kBF16) {
    return CudaCheck(cudaMemcpy(dst, t.data, n * 2, cudaMemcpyHostToDevice), "upload");
  }
  std::vector<uint16_t> tmp(n);
  for (int64_t i = 0; i < n; ++i) {
    float f;
    std::memcpy(&f, t.data + 4 * i, 4);
    tmp[i] = FloatToBf16(f);
  }
  return CudaCheck(cudaMemcpy(dst, tmp.data(), n * 2, cudaMemcpyHostToDevice), "upload");
}

absl::Status UploadF32(const Checkpoint& ckpt, const std::string& name,
                       const std::vector<int64_t>& shape, float* dst) {
  ASSIGN_OR_RETURN(TensorView t, GetDense(ckpt, name, shape));
  const int64_t n = t.numel();
  std::vector<float> tmp(n);
  for (int64_t i = 0; i < n; ++i) {
    if (t.dtype == DType::kF32) {
      std::memcpy(&tmp[i], t.data + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, t.data + 2 * i, 2);
      tmp[i] = Bf16ToFloat(h);
    }
  }
  return CudaCheck(cudaMemcpy(dst, tmp.data(), n * 4, cudaMemcpyHostToDevice), "upload");
}

template <typename T>
absl::Status Alloc(DeviceArray<T>& a, int64_t n, size_t& total) {
  RETURN_IF_ERROR(a.Reserve(static_cast<size_t>(n)));
  total += a.bytes();
  return absl::OkStatus();
}

absl::Status LaunchCheck(const char* what) { return CudaCheck(cudaGetLastError(), what); }

}  // namespace

absl::StatusOr<std::unique_ptr<GptOssGpu>> GptOssGpu::Create(const ModelConfig& config,
                                                             const Checkpoint& checkpoint,
                                                             MoeExecutor* moe,
                                                             cudaStream_t stream) {
  RETURN_IF_ERROR(CheckGptOssConfig(config));
  std::unique_ptr<GptOssGpu> m(new GptOssGpu());
  m->config_ = config;
  m->moe_ = moe;
  ASSIGN_OR_RETURN(m->rope_, ComputeRopeParams(config));
  ASSIGN_OR_RETURN(m->gemm_, LtGemm::Create());
  RETURN_IF_ERROR(m->Load(checkpoint, stream));
  if (moe == nullptr) RETURN_IF_ERROR(m->LoadExperts(checkpoint, stream));
  return m;
}

absl::Status GptOssGpu::Load(const Checkpoint& ckpt, cudaStream_t stream) {
  const ModelConfig& c = config_;
  const int64_t H = c.hidden_size, V = c.vocab_size, E = c.num_local_experts;
  const int64_t qd = int64_t{c.num_attention_heads} * c.head_dim;
  const int64_t kvd = int64_t{c.num_key_value_heads} * c.head_dim;
  size_t& total = weight_bytes_;
  RETURN_IF_ERROR(Alloc(inv_freq_, rope_.inv_freq.size(), total));
  RETURN_IF_ERROR(CudaCheck(cudaMemcpy(inv_freq_.get(), rope_.inv_freq.data(),
                                       rope_.inv_freq.size() * sizeof(float),
                                       cudaMemcpyHostToDevice),
                            "upload inv_freq"));
  RETURN_IF_ERROR(Alloc(embed_, V * H, total));
  RETURN_IF_ERROR(UploadBf16(ckpt, "model.embed_tokens.weight", {V, H}, embed_.get()));
  RETURN_IF_ERROR(Alloc(final_norm_, H, total));
  RETURN_IF_ERROR(UploadF32(ckpt, "model.norm.weight", {H}, final_norm_.get()));
  if (!c.tie_word_embeddings) {
    RETURN_IF_ERROR(Alloc(lm_head_, V * H, total));
    RETURN_IF_ERROR(UploadBf16(ckpt, "lm_head.weight", {V, H}, lm_head_.get()));
  }
  layers_.resize(c.num_hidden_layers);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    Layer& L = layers_[l];
    L.sliding = c.IsSlidingLayer(l);
    RETURN_IF_ERROR(Alloc(L.input_norm, H, total));
    RETURN_IF_ERROR(UploadF32(ckpt, LayerName(l, "input_layernorm.weight"), {H}, L.input_norm.get()));
    RETURN_IF_ERROR(Alloc(L.post_norm, H, total));
    RETURN_IF_ERROR(UploadF32(ckpt, LayerName(l, "post_attention_layernorm.weight"), {H}, L.post_norm.get()));
    RETURN_IF_ERROR(Alloc(L.qkv_w, (qd + 2 * kvd) * H, total));
    RETURN_IF_ERROR(UploadBf16(ckpt, LayerName(l, "self_attn.q_proj.weight"), {qd, H}, L.qkv_w.get()));
    RETURN_IF_ERROR(UploadBf16(ckpt, LayerName(l, "self_attn.k_proj.weight"), {kvd, H}, L.qkv_w.get() + qd * H));
    RETURN_IF_ERROR(UploadBf16(ckpt, LayerName(l, "self_attn.v_proj.weight"), {kvd, H}, L.qkv_w.get() + (qd + kvd) * H));
    RETURN_IF_ERROR(Alloc(L.qkv_b, qd + 2 * kvd, total));
    RETURN_IF_ERROR(Alloc(L.o_b, H, total));
    if (c.attention_bias) {
      RETURN_IF_ERROR(UploadF32(ckpt, LayerName(l, "self_attn.q_proj.bias"), {qd}, L.qkv_b.get()));
      RETURN_IF_ERROR(UploadF32(ckpt, LayerName(l, "self_attn.k_proj.bias"), {kvd}, L.qkv_b.get() + qd));
      RETURN_IF_ERROR(UploadF32(ckpt, LayerName(l, "self_attn.v_proj.bias"), {kvd}, L.qkv_b.get() + qd + kvd));
      RETURN_IF_ERROR(UploadF32(ckpt, LayerName(l, "self_attn.o_proj.bias"), {H}, L.o_b.get()));
    } else {
      RETURN_IF_ERROR(CudaCheck(cudaMemset(L.qkv_b.get(), 0, L.qkv_b.bytes()), "memset"));
      RETURN_IF_ERROR(CudaCheck(cudaMemset(L.o_b.get(), 0, L.o_b.bytes()), "memset"));
    }
    RETURN_IF_ERROR(Alloc(L.o_w, H * qd, total));
    RETURN_IF_ERROR(UploadBf16(ckpt, LayerName(l, "self_attn.o_proj.weight"), {H, qd}, L.o_w.get()));
    RETURN_IF_ERROR(Alloc(L.sinks, c.num_attention_heads, total));
    RETURN_IF_ERROR(UploadF32(ckpt, LayerName(l, "self_attn.sinks"), {c.num_attention_heads}, L.sinks.get()));
    RETURN_IF_ERROR(Alloc(L.router_w, E * H, total));
    RETURN_IF_ERROR(UploadF32(ckpt, LayerName(l, "mlp.router.weight"), {E, H}, L.router_w.get()));
    RETURN_IF_ERROR(Alloc(L.router_b, E, total));
    RETURN_IF_ERROR(UploadF32(ckpt, LayerName(l, "mlp.router.bias"), {E}, L.router_b.get()));
  }
  return CudaCheck(cudaStreamSynchronize(stream), "dense upload");
}

absl::Status GptOssGpu::LoadExperts(const Checkpoint& ckpt, cudaStream_t stream) {
  std::vector<int> all(config_.num_local_experts);
  for (int e = 0; e < config_.num_local_experts; ++e) all[e] = e;
  ASSIGN_OR_RETURN(std::unique_ptr<ExpertShard> shard, ExpertShard::Load(ckpt, config_, all));
  for (int l = 0; l < config_.num_hidden_layers; ++l) {
    auto layer = kernels::cuda::CudaMoeLayer::Upload(shard->layer(l), stream);
    if (!layer.ok()) {
      return absl::Status(layer.status().code(),
                          absl::StrCat("experts of layer ", l, ": ", layer.status().message()));
    }
    weight_bytes_ += (*layer)->device_bytes();
    layers_[l].experts = *std::move(layer);
  }
  return absl::OkStatus();
}

absl::Status GptOssGpu::Reserve(int max_tokens, int max_rows) {
  const ModelConfig& c = config_;
  // Buffers only grow: the capacity is the largest step reserved so far.
  const int64_t T = std::max({1, max_tokens, max_tokens_});
  const int64_t R = std::max({1, max_rows, max_rows_});
  const int64_t H = c.hidden_size, E = c.num_local_experts, K = c.num_experts_per_tok;
  const int64_t qd = int64_t{c.num_attention_heads} * c.head_dim;
  const int64_t qkvd = qd + 2 * int64_t{c.num_key_value_heads} * c.head_dim;
  RETURN_IF_ERROR(h_.Reserve(T * H));
  RETURN_IF_ERROR(y32_.Reserve(T * H));
  RETURN_IF_ERROR(tmp_.Reserve(T * H));
  RETURN_IF_ERROR(y16_.Reserve(T * H));
  RETURN_IF_ERROR(qkv_.Reserve(T * qkvd));
  RETURN_IF_ERROR(q_.Reserve(T * qd));
  RETURN_IF_ERROR(attn16_.Reserve(T * qd));
  RETURN_IF_ERROR(router_logits_.Reserve(T * E));
  RETURN_IF_ERROR(topk_ids_.Reserve(T * K));
  RETURN_IF_ERROR(topk_w_.Reserve(T * K));
  RETURN_IF_ERROR(logits_.Reserve(R * c.vocab_size));
  if (moe_ != nullptr) {
    RETURN_IF_ERROR(host_x_.Reserve(T * H));
    RETURN_IF_ERROR(host_out_.Reserve(T * H));
    RETURN_IF_ERROR(host_ids_.Reserve(T * K));
    RETURN_IF_ERROR(host_w_.Reserve(T * K));
  } else if (!layers_.empty()) {
    RETURN_IF_ERROR(moe_ws_.Reserve(*layers_[0].experts, static_cast<int>(T), static_cast<int>(K)));
  }
  max_tokens_ = static_cast<int>(T);
  max_rows_ = static_cast<int>(R);
  return absl::OkStatus();
}

absl::Status GptOssGpu::Attention(int l, const GpuStep& step, const GpuKvCache& cache,
                                  cudaStream_t s) {
  const ModelConfig& c = config_;
  const Layer& L = layers_[l];
  const int T = step.num_tokens, H = c.hidden_size, nq = c.num_attention_heads;
  const int qd = nq * c.head_dim, qkvd = qd + 2 * c.num_key_value_heads * c.head_dim;
  dk::RmsNorm(h_.get(), nullptr, T, H, L.input_norm.get(), static_cast<float>(c.rms_norm_eps),
              nullptr, y16_.get(), s);
  RETURN_IF_ERROR(gemm_->LinearBf16(y16_.get(), L.qkv_w.get(), T, qkvd, H, qkv_.get(), s));
  const dk::KvLayer kv = cache.layer(l);
  dk::QkvRopeStore(qkv_.get(), L.qkv_b.get(), nq, dk::Rope{inv_freq_.get(), rope_.concentration},
                   step.layout, kv, q_.get(), s);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.head_dim)));
  dk::PagedAttention(q_.get(), nq, step.layout, kv, L.sinks.get(),
                     L.sliding ? c.sliding_window : 0, scale, attn16_.get(), s);
  RETURN_IF_ERROR(gemm_->LinearBf16(attn16_.get(), L.o_w.get(), T, H, qd, tmp_.get(), s));
  dk::AddResidual(h_.get(), tmp_.get(), L.o_b.get(), T, H, s);
  return LaunchCheck("attention");
}

absl::Status GptOssGpu::Moe(int l, int num_tokens, cudaStream_t s) {
  const ModelConfig& c = config_;
  const Layer& L = layers_[l];
  const int T = num_tokens, H = c.hidden_size, E = c.num_local_experts;
  const int K = c.num_experts_per_tok;
  dk::RmsNorm(h_.get(), nullptr, T, H, L.post_norm.get(), static_cast<float>(c.rms_norm_eps),
              y32_.get(), nullptr, s);
  RETURN_IF_ERROR(gemm_->LinearF32(y32_.get(), L.router_w.get(), T, E, H, router_logits_.get(), s));
  dk::AddBias(router_logits_.get(), L.router_b.get(), T, E, s);
  dk::RouterTopK(router_logits_.get(), T, E, K, topk_ids_.get(), topk_w_.get(), s);
  if (moe_ == nullptr) {
    kernels::cuda::CudaMoeBatch b;
    b.num_tokens = T;
    b.top_k = K;
    b.x = y32_.get();
    b.expert_ids = topk_ids_.get();
    b.weights = topk_w_.get();
    RETURN_IF_ERROR(kernels::cuda::MoeForwardCuda(*L.experts, b, tmp_.get(), moe_ws_, s));
  } else {
    // Workers: the activations cross to the host and the partial sums come back.
    const size_t xb = size_t(T) * H * sizeof(float), kb = size_t(T) * K;
    RETURN_IF_ERROR(CudaCheck(cudaMemcpyAsync(host_x_.get(), y32_.get(), xb, cudaMemcpyDeviceToHost, s), "copy x"));
    RETURN_IF_ERROR(CudaCheck(cudaMemcpyAsync(host_ids_.get(), topk_ids_.get(), kb * 4, cudaMemcpyDeviceToHost, s), "copy ids"));
    RETURN_IF_ERROR(CudaCheck(cudaMemcpyAsync(host_w_.get(), topk_w_.get(), kb * 4, cudaMemcpyDeviceToHost, s), "copy weights"));
    RETURN_IF_ERROR(CudaCheck(cudaStreamSynchronize(s), "routing"));
    ExpertBatch batch;
    batch.layer = l;
    batch.hidden = H;
    batch.num_tokens = T;
    batch.top_k = K;
    batch.x = host_x_.get();
    batch.expert_ids = host_ids_.get();
    batch.weights = host_w_.get();
    RETURN_IF_ERROR(moe_->Run(batch, host_out_.get()));
    RETURN_IF_ERROR(CudaCheck(cudaMemcpyAsync(tmp_.get(), host_out_.get(), xb, cudaMemcpyHostToDevice, s), "copy out"));
  }
  dk::AddResidual(h_.get(), tmp_.get(), nullptr, T, H, s);
  return LaunchCheck("moe");
}

absl::Status GptOssGpu::Forward(const GpuStep& step, const GpuKvCache& cache, cudaStream_t s) {
  const ModelConfig& c = config_;
  const int T = step.num_tokens, R = step.num_rows, H = c.hidden_size;
  if (T > max_tokens_ || R > max_rows_ || R > T) {
    return absl::InternalError(absl::StrCat("step of ", T, " tokens and ", R,
                                            " logits rows exceeds the reserved ", max_tokens_,
                                            " and ", max_rows_));
  }
  dk::EmbedRows(embed_.get(), step.token_ids, T, H, h_.get(), s);
  for (int l = 0; l < c.num_hidden_layers; ++l) {
    RETURN_IF_ERROR(Attention(l, step, cache, s));
    RETURN_IF_ERROR(Moe(l, T, s));
  }
  dk::RmsNorm(h_.get(), step.rows, R, H, final_norm_.get(), static_cast<float>(c.rms_norm_eps),
              nullptr, y16_.get(), s);
  const uint16_t* unembed = c.tie_word_embeddings ? embed_.get() : lm_head_.get();
  RETURN_IF_ERROR(gemm_->LinearBf16(y16_.get(), unembed, R, c.vocab_size, H, logits_.get(), s));
  return LaunchCheck("lm_head");
}

}  // namespace mxserve::gpu
