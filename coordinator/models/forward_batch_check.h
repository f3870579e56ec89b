// The checks every ModelRunner makes on a step's batch before it touches its KV cache (the CPU
// and the GPU runner alike): a bad batch is an error naming the chunk, never a corrupt cache.
#pragma once

#include "absl/status/status.h"
#include "coordinator/engine/model_runner.h"

namespace mxserve {

struct RunnerShape {
  int vocab_size = 0;
  int block_size = 0;
  int num_blocks = 0;
  int max_model_len = 0;
};

// InvalidArgument naming the chunk for: no tokens, token id outside [0, vocab), start_pos < 0,
// positions reaching max_model_len, a block table too short or with ids outside
// [0, num_blocks), the same seq_id twice in one batch, two chunks writing the same KV slot.
absl::Status CheckForwardBatch(const ForwardBatch& batch, const RunnerShape& shape);

}  // namespace mxserve
