// What a model calls at each MoE layer: run the routed experts for a batch of tokens and write
// the routing-weighted sum. Implemented by ExpertRouter (workers over gRPC or in-process).
#pragma once

#include "absl/status/status.h"
#include "experts/expert_batch.h"

namespace mxserve {

class MoeExecutor {
 public:
  virtual ~MoeExecutor() = default;
  // batch.x [T, H] (post-attention-norm hidden), expert_ids/weights [T, k] (global ids, all
  // >= 0); out [T, H] overwritten with sum_j weights[t,j] * expert_{ids[t,j]}(x_t).
  virtual absl::Status Run(const ExpertBatch& batch, float* out) = 0;
};

}  // namespace mxserve
