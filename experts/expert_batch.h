// One MoE layer's routed tokens on their way to the experts. The same value goes from the model
// (MoeExecutor) through the ExpertRouter to each ExpertBackend (a group's slice), is what a
// RunExpertsRequest carries over the wire, and is what the worker's ExpertExecutor, the
// ExpertShard and the kernels run: it is the kernels' MoeBatch plus the layer and row width.
#pragma once

#include "kernels/moe/moe.h"

namespace mxserve {

// num_tokens, top_k, x [T, hidden], expert_ids [T, k] (-1 = skip) and weights [T, k] are the
// kernels' own (kernels/moe/moe.h), so a batch reaches them as it is.
struct ExpertBatch : kernels::MoeBatch {
  int layer = 0;
  int hidden = 0;  // H, the width of x's rows and of the output's
};

}  // namespace mxserve
