// MoeForwardReference: the plain oracle. Token by token, slot by slot, one dequantized row at
// a time, float accumulation in index order. Deliberately simple; the fast path is held to it.
#include <algorithm>
#include <vector>

#include "kernels/moe/moe.h"
#include "kernels/moe/mxfp4_block.h"

namespace mxserve::kernels {

absl::Status MoeForwardReference(const MoeLayer& layer, const MoeBatch& batch, float* out) {
  absl::Status s = ValidateMoeBatch(layer, batch);
  if (!s.ok()) return s;
  const int H = layer.hidden, I = layer.intermediate, k = batch.top_k;
  std::fill(out, out + static_cast<int64_t>(batch.num_tokens) * H, 0.0f);
  std::vector<float> row(std::max(H, I)), gu(2 * I), act(I);
  for (int t = 0; t < batch.num_tokens; ++t) {
    const float* x = batch.x + static_cast<int64_t>(t) * H;
    float* o = out + static_cast<int64_t>(t) * H;
    for (int j = 0; j < k; ++j) {
      const int e = batch.expert_ids[static_cast<int64_t>(t) * k + j];
      if (e < 0) continue;
      const ExpertWeights& w = *layer.experts[e];
      const float weight = batch.weights[static_cast<int64_t>(t) * k + j];
      for (int r = 0; r < 2 * I; ++r) {
        internal::DecodeMxfp4Row(w.gate_up.blocks + static_cast<int64_t>(r) * (H / 2),
                                 w.gate_up.scales + static_cast<int64_t>(r) * (H / 32), H,
                                 row.data());
        float acc = 0.0f;
        for (int c = 0; c < H; ++c) acc += row[c] * x[c];
        gu[r] = acc + (w.gate_up_bias ? w.gate_up_bias[r] : 0.0f);
      }
      for (int i = 0; i < I; ++i) {
        act[i] = layer.activation == MoeActivation::kSwiGlu
                     ? internal::SiluMul(gu[2 * i], gu[2 * i + 1])
                     : internal::SwiGlu(gu[2 * i], gu[2 * i + 1], layer.swiglu_alpha,
                                        layer.swiglu_limit);
      }
      for (int r = 0; r < H; ++r) {
        internal::DecodeMxfp4Row(w.down.blocks + static_cast<int64_t>(r) * (I / 2),
                                 w.down.scales + static_cast<int64_t>(r) * (I / 32), I,
                                 row.data());
        float acc = 0.0f;
        for (int c = 0; c < I; ++c) acc += row[c] * act[c];
        o[r] += weight * (acc + (w.down_bias ? w.down_bias[r] : 0.0f));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace mxserve::kernels
