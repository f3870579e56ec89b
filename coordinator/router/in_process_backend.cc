#include "coordinator/router/in_process_backend.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace mxserve {

absl::Status InProcessExpertBackend::RunExperts(const ExpertCall& call, float* out,
                                                absl::Time deadline) {
  if (call.hidden != shard_->hidden()) {
    return absl::InvalidArgumentError(absl::StrCat(name_, ": hidden ", call.hidden,
                                                   " does not match the model's ",
                                                   shard_->hidden()));
  }
  kernels::MoeBatch batch;
  batch.num_tokens = call.num_tokens;
  batch.top_k = call.top_k;
  batch.x = call.x;
  batch.expert_ids = call.expert_ids;
  batch.weights = call.weights;
  absl::Status s = shard_->Run(call.layer, batch, out, pool_.get());
  if (!s.ok()) return absl::Status(s.code(), absl::StrCat(name_, ": ", s.message()));
  return absl::OkStatus();
}

}  // namespace mxserve
