// The engine's view of the model: run one step's batch of sequence chunks through the network
// and return logits. The KV cache lives behind the runner; the scheduler's BlockManager hands
// out the block ids that each chunk's block_table names.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace mxserve {

// One sequence's share of a step: `tokens` at positions [start_pos, start_pos + tokens.size()).
// Prefill chunks have many tokens, decode chunks one. KV for positions < start_pos is already in
// the cache; the runner writes KV for the new positions.
struct SequenceChunk {
  int64_t seq_id = 0;
  std::vector<int32_t> tokens;
  int start_pos = 0;
  // KV blocks covering positions [0, start_pos + tokens.size()): position p lives in block
  // block_table[p / block_size], slot p % block_size.
  std::vector<int32_t> block_table;
  // false: logits for the last token only; true: for every token (prompt logprobs).
  bool all_logits = false;
  // The engine needs only the argmax of this chunk's row (greedy, no logprobs): a runner may
  // answer with ForwardOutput::argmax instead of the row.
  bool argmax_only = false;
};

struct ForwardBatch {
  std::vector<SequenceChunk> chunks;
};

struct ForwardOutput {
  int vocab_size = 0;
  // Row r of logits is logits[r * vocab_size ...]. Chunk i's rows start at row_offset[i]
  // (1 row, or tokens.size() rows when all_logits).
  std::vector<float> logits;
  std::vector<int> row_offset;
  // Instead of logits, when every chunk of the batch is argmax_only: per row, the lowest id
  // among the largest logits (the GPU runner then copies ids, not rows, to the host).
  std::vector<int32_t> argmax;
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  virtual absl::StatusOr<ForwardOutput> Run(const ForwardBatch& batch) = 0;
  virtual int vocab_size() const = 0;
  virtual int block_size() const = 0;   // tokens per KV block
  virtual int num_blocks() const = 0;   // KV blocks in the cache
  virtual int max_model_len() const = 0;
};

}  // namespace mxserve
