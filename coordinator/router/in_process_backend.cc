#include "coordinator/router/in_process_backend.h"

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace mxserve {

absl::Status InProcessExpertBackend::RunExperts(const ExpertBatch& call, float* out,
                                                absl::Time deadline) {
  absl::Status s = shard_->Run(call, out, pool_.get());
  if (!s.ok()) return absl::Status(s.code(), absl::StrCat(name_, ": ", s.message()));
  return absl::OkStatus();
}

}  // namespace mxserve
