#include "experts/expert_shard.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/bf16.h"
#include "core/mxfp4.h"
#include "core/status.h"

namespace mxserve {

AlignedBytes::AlignedBytes(size_t n) : size_(n) {
  // aligned_alloc wants a size that is a multiple of the alignment.
  size_t rounded = (n + 63) / 64 * 64;
  if (rounded == 0) rounded = 64;
  // On failure data() is nullptr and the loader reports RESOURCE_EXHAUSTED (no exceptions).
  ptr_.reset(static_cast<uint8_t*>(std::aligned_alloc(64, rounded)));
  if (ptr_ == nullptr) size_ = 0;
}

void AlignedBytes::Free::operator()(uint8_t* p) const { std::free(p); }

bool ExpertShard::Holds(int expert) const {
  return std::binary_search(experts_.begin(), experts_.end(), expert);
}

absl::StatusOr<std::unique_ptr<ExpertShard>> ExpertShard::Load(const Checkpoint& ckpt,
                                                               const ModelConfig& config,
                                                               std::vector<int> experts,
                                                               const ProgressFn& progress) {
  const int E = config.num_local_experts;
  if (config.num_hidden_layers <= 0 || config.hidden_size <= 0 || config.intermediate_size <= 0 ||
      E <= 0) {
    return absl::InvalidArgumentError(
        "expert shard: config needs positive num_hidden_layers, hidden_size, "
        "intermediate_size and num_local_experts");
  }
  if (config.hidden_size % mxfp4::kBlockSize != 0 ||
      config.intermediate_size % mxfp4::kBlockSize != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "expert shard: hidden_size (", config.hidden_size, ") and intermediate_size (",
        config.intermediate_size, ") must be multiples of 32 for MXFP4 experts"));
  }
  std::sort(experts.begin(), experts.end());
  for (size_t i = 0; i < experts.size(); ++i) {
    if (experts[i] < 0 || experts[i] >= E) {
      return absl::InvalidArgumentError(absl::StrCat("experts: id ", experts[i],
                                                     " out of range [0, ", E, ")"));
    }
    if (i > 0 && experts[i] == experts[i - 1]) {
      return absl::InvalidArgumentError(absl::StrCat("experts: id ", experts[i], " repeated"));
    }
  }
  auto shard = std::unique_ptr<ExpertShard>(new ExpertShard());
  shard->num_experts_ = E;
  shard->hidden_ = config.hidden_size;
  shard->intermediate_ = config.intermediate_size;
  shard->alpha_ = static_cast<float>(config.swiglu_alpha);
  shard->limit_ = static_cast<float>(config.swiglu_limit);
  shard->bf16_experts_ = config.IsDeepseekV3();
  shard->activation_ = shard->bf16_experts_ ? kernels::MoeActivation::kSwiGlu
                                            : kernels::MoeActivation::kClampedSwiGlu;
  shard->first_moe_layer_ = shard->bf16_experts_ ? config.first_k_dense_replace : 0;
  shard->experts_ = std::move(experts);
  shard->layers_.resize(config.num_hidden_layers);
  for (int l = 0; l < config.num_hidden_layers; ++l) {
    Layer& layer = shard->layers_[l];
    if (l < shard->first_moe_layer_) {  // a dense layer: no experts
      layer.moe.hidden = shard->hidden_;
      layer.moe.intermediate = shard->intermediate_;
      layer.moe.activation = shard->activation_;
      layer.moe.experts.assign(E, nullptr);
    } else if (shard->bf16_experts_) {
      RETURN_IF_ERROR(shard->LoadLayerBf16(ckpt, l, layer));
    } else {
      RETURN_IF_ERROR(shard->LoadLayer(ckpt, l, layer));
    }
    if (progress) progress(l + 1, config.num_hidden_layers);
  }
  return shard;
}

namespace {

// Copies the held experts' slices ([E, per_expert...] tensor, slice e) into dst, in held order.
void CopyExperts(const TensorView& t, const std::vector<int>& held, size_t per_expert,
                 uint8_t* dst) {
  for (size_t i = 0; i < held.size(); ++i) {
    std::memcpy(dst + i * per_expert, t.data + static_cast<size_t>(held[i]) * per_expert,
                per_expert);
  }
}

absl::Status CheckScales(const TensorView& t, const std::vector<int>& held, size_t per_expert,
                         int64_t blocks_per_row) {
  for (int e : held) {
    const uint8_t* s = t.data + static_cast<size_t>(e) * per_expert;
    const void* bad = std::memchr(s, mxfp4::kNanScale, per_expert);
    if (bad != nullptr) {
      size_t off = static_cast<const uint8_t*>(bad) - s;
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", t.name, "' in ", t.file, ": expert ", e, " row ", off / blocks_per_row,
          " block ", off % blocks_per_row,
          " has scale byte 0xFF (NaN in E8M0); the checkpoint is corrupt"));
    }
  }
  return absl::OkStatus();
}

void BiasToFloat(const TensorView& t, const std::vector<int>& held, int64_t n, float* dst) {
  for (size_t i = 0; i < held.size(); ++i) {
    const uint8_t* src = t.data + static_cast<size_t>(held[i]) * n * 2;
    for (int64_t j = 0; j < n; ++j) {
      uint16_t h;
      std::memcpy(&h, src + 2 * j, 2);
      dst[i * n + j] = Bf16ToFloat(h);
    }
  }
}

}  // namespace

absl::Status ExpertShard::LoadLayer(const Checkpoint& ckpt, int l, Layer& layer) {
  const int64_t E = num_experts_, H = hidden_, I = intermediate_;
  const int64_t GU = 2 * I;
  const std::string p = absl::StrCat("model.layers.", l, ".mlp.experts.");
  const int64_t gu_blocks_shape[] = {E, GU, H / 32, 16};
  const int64_t gu_scales_shape[] = {E, GU, H / 32};
  const int64_t gu_bias_shape[] = {E, GU};
  const int64_t dn_blocks_shape[] = {E, H, I / 32, 16};
  const int64_t dn_scales_shape[] = {E, H, I / 32};
  const int64_t dn_bias_shape[] = {E, H};
  ASSIGN_OR_RETURN(TensorView gub, ckpt.Get(p + "gate_up_proj_blocks", DType::kU8, gu_blocks_shape));
  ASSIGN_OR_RETURN(TensorView gus, ckpt.Get(p + "gate_up_proj_scales", DType::kU8, gu_scales_shape));
  ASSIGN_OR_RETURN(TensorView gubias, ckpt.Get(p + "gate_up_proj_bias", DType::kBF16, gu_bias_shape));
  ASSIGN_OR_RETURN(TensorView dnb, ckpt.Get(p + "down_proj_blocks", DType::kU8, dn_blocks_shape));
  ASSIGN_OR_RETURN(TensorView dns, ckpt.Get(p + "down_proj_scales", DType::kU8, dn_scales_shape));
  ASSIGN_OR_RETURN(TensorView dnbias, ckpt.Get(p + "down_proj_bias", DType::kBF16, dn_bias_shape));

  const size_t n = experts_.size();
  const size_t gub_per = GU * (H / 2), gus_per = GU * (H / 32);
  const size_t dnb_per = H * (I / 2), dns_per = H * (I / 32);
  RETURN_IF_ERROR(CheckScales(gus, experts_, gus_per, H / 32));
  RETURN_IF_ERROR(CheckScales(dns, experts_, dns_per, I / 32));

  RETURN_IF_ERROR(AllocateOrFail(l, n, layer));
  CopyExperts(gub, experts_, gub_per, layer.gate_up_blocks.data());
  CopyExperts(gus, experts_, gus_per, layer.gate_up_scales.data());
  CopyExperts(dnb, experts_, dnb_per, layer.down_blocks.data());
  CopyExperts(dns, experts_, dns_per, layer.down_scales.data());
  layer.gate_up_bias.resize(n * GU);
  layer.down_bias.resize(n * H);
  BiasToFloat(gubias, experts_, GU, layer.gate_up_bias.data());
  BiasToFloat(dnbias, experts_, H, layer.down_bias.data());
  resident_bytes_ += n * (gub_per + gus_per + dnb_per + dns_per) + 4 * n * (GU + H);

  Describe(layer, /*biases=*/true);
  return absl::OkStatus();
}

void ExpertShard::Allocate(size_t n, Layer& layer) {
  const size_t H = hidden_, I = intermediate_;
  layer.gate_up_blocks = AlignedBytes(n * 2 * I * (H / 2));
  layer.gate_up_scales = AlignedBytes(n * 2 * I * (H / 32));
  layer.down_blocks = AlignedBytes(n * H * (I / 2));
  layer.down_scales = AlignedBytes(n * H * (I / 32));
}

void ExpertShard::Describe(Layer& layer, bool biases) {
  const size_t n = experts_.size(), H = hidden_, I = intermediate_, GU = 2 * I;
  const size_t gub_per = GU * (H / 2), gus_per = GU * (H / 32);
  const size_t dnb_per = H * (I / 2), dns_per = H * (I / 32);
  layer.weights.resize(n);
  layer.moe.hidden = hidden_;
  layer.moe.intermediate = intermediate_;
  layer.moe.activation = activation_;
  layer.moe.swiglu_alpha = alpha_;
  layer.moe.swiglu_limit = limit_;
  layer.moe.experts.assign(num_experts_, nullptr);
  for (size_t i = 0; i < n; ++i) {
    kernels::ExpertWeights& w = layer.weights[i];
    w.gate_up = {layer.gate_up_blocks.data() + i * gub_per, layer.gate_up_scales.data() + i * gus_per,
                 static_cast<int>(GU), static_cast<int>(H)};
    w.gate_up_bias = biases ? layer.gate_up_bias.data() + i * GU : nullptr;
    w.down = {layer.down_blocks.data() + i * dnb_per, layer.down_scales.data() + i * dns_per,
              static_cast<int>(H), static_cast<int>(I)};
    w.down_bias = biases ? layer.down_bias.data() + i * H : nullptr;
    layer.moe.experts[experts_[i]] = &w;
  }
}

namespace {

// Reads a bf16 [rows, cols] expert matrix and quantizes row r into packed/scales row
// dst_row(r) (interleaving gate and up rows into gate_up).
template <typename RowFn>
absl::Status QuantizeBf16(const Checkpoint& ckpt, const std::string& name, int64_t rows,
                          int64_t cols, uint8_t* packed, uint8_t* scales, RowFn dst_row) {
  const int64_t shape[] = {rows, cols};
  ASSIGN_OR_RETURN(TensorView t, ckpt.Get(name, DType::kBF16, shape));
  std::vector<float> row(cols);
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* src = t.data + r * cols * 2;
    for (int64_t c = 0; c < cols; ++c) {
      uint16_t h;
      std::memcpy(&h, src + 2 * c, 2);
      row[c] = Bf16ToFloat(h);
      if (!std::isfinite(row[c])) {
        return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' in ", t.file,
                                                       ": row ", r, " column ", c,
                                                       " is not finite"));
      }
    }
    const int64_t d = dst_row(r);
    mxfp4::EncodeRow(row.data(), cols, packed + d * (cols / 2), scales + d * (cols / 32));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ExpertShard::LoadLayerBf16(const Checkpoint& ckpt, int l, Layer& layer) {
  const int64_t H = hidden_, I = intermediate_;
  const size_t n = experts_.size();
  RETURN_IF_ERROR(AllocateOrFail(l, n, layer));
  const size_t gub_per = 2 * I * (H / 2), gus_per = 2 * I * (H / 32);
  const size_t dnb_per = H * (I / 2), dns_per = H * (I / 32);
  for (size_t i = 0; i < n; ++i) {
    const std::string p = absl::StrCat("model.layers.", l, ".mlp.experts.", experts_[i], ".");
    uint8_t* gub = layer.gate_up_blocks.data() + i * gub_per;
    uint8_t* gus = layer.gate_up_scales.data() + i * gus_per;
    RETURN_IF_ERROR(QuantizeBf16(ckpt, p + "gate_proj.weight", I, H, gub, gus,
                                 [](int64_t r) { return 2 * r; }));
    RETURN_IF_ERROR(QuantizeBf16(ckpt, p + "up_proj.weight", I, H, gub, gus,
                                 [](int64_t r) { return 2 * r + 1; }));
    RETURN_IF_ERROR(QuantizeBf16(ckpt, p + "down_proj.weight", H, I,
                                 layer.down_blocks.data() + i * dnb_per,
                                 layer.down_scales.data() + i * dns_per,
                                 [](int64_t r) { return r; }));
  }
  resident_bytes_ += n * (gub_per + gus_per + dnb_per + dns_per);
  Describe(layer, /*biases=*/false);
  return absl::OkStatus();
}

absl::Status ExpertShard::AllocateOrFail(int l, size_t n, Layer& layer) {
  Allocate(n, layer);
  if (layer.gate_up_blocks.data() == nullptr || layer.gate_up_scales.data() == nullptr ||
      layer.down_blocks.data() == nullptr || layer.down_scales.data() == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "expert shard: out of memory for layer ", l, " (", n, " experts, ",
        (layer.gate_up_blocks.size() + layer.gate_up_scales.size() + layer.down_blocks.size() +
         layer.down_scales.size()) >> 20, " MiB)"));
  }
  return absl::OkStatus();
}

absl::Status ExpertShard::Run(const ExpertBatch& batch, float* out, ThreadPool* pool) const {
  if (batch.layer < 0 || batch.layer >= num_layers()) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer ", batch.layer, " out of range [0, ", num_layers(), ")"));
  }
  if (batch.hidden != hidden_) {
    return absl::InvalidArgumentError(
        absl::StrCat("hidden ", batch.hidden, " does not match the model's ", hidden_));
  }
  return kernels::MoeForwardFast(layers_[batch.layer].moe, batch, out, pool);
}

}  // namespace mxserve
