#include "coordinator/models/forward_batch_check.h"

#include <unordered_map>
#include <unordered_set>

#include "absl/strings/str_cat.h"

namespace mxserve {

absl::Status CheckForwardBatch(const ForwardBatch& batch, const RunnerShape& shape) {
  const int bs = shape.block_size;
  std::unordered_set<int64_t> seen;
  // KV slot (block * block_size + slot) -> the chunk writing it this step.
  std::unordered_map<int64_t, size_t> writer;
  for (size_t i = 0; i < batch.chunks.size(); ++i) {
    const SequenceChunk& ch = batch.chunks[i];
    const std::string who = absl::StrCat("chunk ", i, " (seq_id ", ch.seq_id, "): ");
    if (!seen.insert(ch.seq_id).second) {
      return absl::InvalidArgumentError(absl::StrCat(who, "seq_id appears twice in the batch"));
    }
    if (ch.tokens.empty()) return absl::InvalidArgumentError(absl::StrCat(who, "no tokens"));
    if (ch.start_pos < 0) {
      return absl::InvalidArgumentError(absl::StrCat(who, "start_pos ", ch.start_pos, " < 0"));
    }
    const int64_t end = static_cast<int64_t>(ch.start_pos) + static_cast<int64_t>(ch.tokens.size());
    if (end > shape.max_model_len) {
      return absl::InvalidArgumentError(absl::StrCat(who, "positions up to ", end - 1,
                                                     " reach max_model_len ", shape.max_model_len));
    }
    for (size_t j = 0; j < ch.tokens.size(); ++j) {
      if (ch.tokens[j] < 0 || ch.tokens[j] >= shape.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat(
            who, "token ", j, " id ", ch.tokens[j], " outside vocab [0, ", shape.vocab_size, ")"));
      }
    }
    const int64_t blocks_needed = (end + bs - 1) / bs;
    if (static_cast<int64_t>(ch.block_table.size()) < blocks_needed) {
      return absl::InvalidArgumentError(absl::StrCat(
          who, "block_table has ", ch.block_table.size(), " blocks, positions [0, ", end,
          ") need ", blocks_needed, " of size ", bs));
    }
    for (int64_t b = 0; b < blocks_needed; ++b) {
      if (ch.block_table[b] < 0 || ch.block_table[b] >= shape.num_blocks) {
        return absl::InvalidArgumentError(absl::StrCat(who, "block_table[", b, "] = ",
                                                       ch.block_table[b], " outside [0, ",
                                                       shape.num_blocks, ")"));
      }
    }
    // Two chunks writing the same KV slot would corrupt each other's cache silently.
    for (int64_t p = ch.start_pos; p < end; ++p) {
      const int64_t key = static_cast<int64_t>(ch.block_table[p / bs]) * bs +
                          p % bs;
      auto [it, inserted] = writer.emplace(key, i);
      if (!inserted) {
        return absl::InvalidArgumentError(absl::StrCat(
            who, "position ", p, " writes KV block ", ch.block_table[p / bs], " slot ",
            p % bs, ", which chunk ", it->second, " also writes in this step"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace mxserve
