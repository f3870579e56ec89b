// ValidateMoeBatch: every check the kernels rely on, with messages naming the bad field.
#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/moe/moe.h"

namespace mxserve::kernels {
namespace {

absl::Status CheckMatrix(const Mxfp4Matrix& m, int rows, int cols, int expert, const char* name) {
  if (m.rows != rows || m.cols != cols) {
    return absl::InvalidArgumentError(absl::StrCat("expert ", expert, ": ", name, " is [", m.rows,
                                                   ", ", m.cols, "], expected [", rows, ", ",
                                                   cols, "]"));
  }
  if (m.blocks == nullptr || m.scales == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("expert ", expert, ": ", name, " has null blocks or scales"));
  }
  return absl::OkStatus();
}

absl::Status CheckExpert(const MoeLayer& layer, int e) {
  const ExpertWeights& w = *layer.experts[e];
  absl::Status s = CheckMatrix(w.gate_up, 2 * layer.intermediate, layer.hidden, e, "gate_up");
  if (!s.ok()) return s;
  return CheckMatrix(w.down, layer.hidden, layer.intermediate, e, "down");
}

}  // namespace

const char* MoeActivationName(MoeActivation a) {
  return a == MoeActivation::kSwiGlu ? "swiglu" : "swiglu_clamped";
}

absl::Status ValidateMoeBatch(const MoeLayer& layer, const MoeBatch& batch) {
  if (layer.hidden <= 0 || layer.hidden % 32 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("layer.hidden must be a positive multiple of 32, got ", layer.hidden));
  }
  if (layer.intermediate <= 0 || layer.intermediate % 32 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layer.intermediate must be a positive multiple of 32, got ", layer.intermediate));
  }
  if (batch.top_k < 1) {
    return absl::InvalidArgumentError(absl::StrCat("top_k must be >= 1, got ", batch.top_k));
  }
  if (batch.num_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_tokens must be >= 0, got ", batch.num_tokens));
  }
  if (batch.num_tokens == 0) return absl::OkStatus();
  if (batch.x == nullptr || batch.expert_ids == nullptr || batch.weights == nullptr) {
    return absl::InvalidArgumentError("x, expert_ids and weights must be non-null when num_tokens > 0");
  }
  const int num_experts = static_cast<int>(layer.experts.size());
  std::vector<char> checked(num_experts, 0);
  for (int t = 0; t < batch.num_tokens; ++t) {
    for (int j = 0; j < batch.top_k; ++j) {
      const int32_t e = batch.expert_ids[static_cast<int64_t>(t) * batch.top_k + j];
      if (e == -1) continue;
      if (e < 0 || e >= num_experts) {
        return absl::InvalidArgumentError(absl::StrCat("token ", t, " slot ", j, ": expert ", e,
                                                       " out of range [0, ", num_experts,
                                                       ") (or -1 to skip)"));
      }
      if (layer.experts[e] == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat("token ", t, " slot ", j, ": expert ", e,
                                                       " is not held by this process"));
      }
      if (!checked[e]) {
        absl::Status s = CheckExpert(layer, e);
        if (!s.ok()) return s;
        checked[e] = 1;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace mxserve::kernels
