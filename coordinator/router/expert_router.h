// The MoeExecutor the model calls at each MoE layer: splits the layer's batch by the backend
// hosting each slot's expert (Placement), sends every backend its compact slice in parallel,
// each call with a deadline, and adds the partial sums in a fixed backend order (so the result
// does not depend on which call finished first).
#pragma once

#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "coordinator/models/moe_executor.h"
#include "coordinator/router/expert_backend.h"
#include "coordinator/router/placement.h"

namespace mxserve {

struct RouterOptions {
  absl::Duration call_timeout = absl::Seconds(30);  // deadline of each backend call
};

class ExpertRouter final : public MoeExecutor {
 public:
  // backends[b] is backend b of `placement`. Sizes must agree.
  static absl::StatusOr<std::unique_ptr<ExpertRouter>> Create(
      std::vector<std::unique_ptr<ExpertBackend>> backends, Placement placement,
      RouterOptions options = {});
  ~ExpertRouter() override;

  // MoeExecutor. Any backend failure returns its status (naming the backend). Calls are
  // serialised (one layer at a time, as the model runs them).
  absl::Status Run(int layer, int num_tokens, int hidden, int top_k, const float* x,
                   const int32_t* expert_ids, const float* weights, float* out) override
      ABSL_LOCKS_EXCLUDED(mu_);

  const Placement& placement() const { return placement_; }
  int num_backends() const { return static_cast<int>(backends_.size()); }
  ExpertBackend& backend(int b) { return *backends_[b]; }

 private:
  class Fanout;
  // One backend's compact slice of a layer's batch (buffers reused across calls).
  struct Slice {
    std::vector<int> tokens;      // positions in the full batch
    std::vector<float> x;         // [n, H]
    std::vector<int32_t> ids;     // [n, k], -1 where the slot is elsewhere
    std::vector<float> weights;   // [n, k]
    std::vector<float> out;       // [n, H]
    absl::Status status;
    int last_token = -1;
  };

  ExpertRouter(std::vector<std::unique_ptr<ExpertBackend>> backends, Placement placement,
               RouterOptions options);

  std::vector<std::unique_ptr<ExpertBackend>> backends_;
  const Placement placement_;
  const RouterOptions options_;
  absl::Mutex mu_;
  std::vector<Slice> slices_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Fanout> fanout_;
};

}  // namespace mxserve
